package slots

import (
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode"
)

// ErrNoSlot means a scope is full. It is a business wait, not a failure: try
// again later.
var ErrNoSlot = errors.New("no free slot")

// ErrLeaseLost means a lease expired (or a rebuild removed it) before it was
// renewed; its slots may belong to another holder now.
var ErrLeaseLost = errors.New("slot lease lost")

// ErrInvalid matches every error about malformed parameters: an empty or
// malformed scope name, a limit below one, a missing holder, a TTL under a
// millisecond. Such an error is the caller's bug and never goes away on retry.
var ErrInvalid = errors.New("invalid slot parameters")

// maxNameLen bounds scope names and holders; both become part of Redis keys or
// members and should stay short.
const maxNameLen = 256

// Scope is one limit that a job counts against.
type Scope struct {
	// Name identifies the scope, e.g. "tenant:<id>", "model:<name>",
	// "provider:<name>". It must be non-empty and contain no whitespace,
	// control characters or braces.
	Name string
	// Limit is the most unexpired holders the scope admits; at least 1.
	Limit int
}

// AcquireParams says which slots to take, for whom and for how long.
type AcquireParams struct {
	// Scopes are taken all together or not at all.
	Scopes []Scope
	// Holder identifies the lease owner, stable across redeliveries of the
	// same work (a task attempt id): acquiring again with the same holder
	// renews instead of taking another slot.
	Holder string
	// TTL is how long the lease lasts without a renewal; at least 1 ms.
	TTL time.Duration
}

// Lease is a held set of slots. It is a plain value: it can be stored and
// renewed or released by another process that knows the same holder.
type Lease struct {
	// Holder is the lease owner given to Acquire.
	Holder string
	// Scopes are the names of the scopes the lease holds a slot in.
	Scopes []string
	// TTL is the lifetime each Renew gives the lease.
	TTL time.Duration
}

func (p AcquireParams) validate() error {
	if len(p.Scopes) == 0 {
		return fmt.Errorf("acquire needs at least one scope: %w", ErrInvalid)
	}
	seen := make(map[string]struct{}, len(p.Scopes))
	for _, s := range p.Scopes {
		if err := validateScope(s.Name); err != nil {
			return err
		}
		if s.Limit < 1 {
			return fmt.Errorf("scope %q: limit %d is below 1: %w", s.Name, s.Limit, ErrInvalid)
		}
		if _, dup := seen[s.Name]; dup {
			return fmt.Errorf("scope %q is given twice: %w", s.Name, ErrInvalid)
		}
		seen[s.Name] = struct{}{}
	}
	if err := validateHolder(p.Holder); err != nil {
		return err
	}
	return validateTTL(p.TTL)
}

func (l Lease) validate() error {
	if len(l.Scopes) == 0 {
		return fmt.Errorf("lease has no scopes: %w", ErrInvalid)
	}
	for _, name := range l.Scopes {
		if err := validateScope(name); err != nil {
			return err
		}
	}
	return validateHolder(l.Holder)
}

func validateScope(name string) error {
	if name == "" {
		return fmt.Errorf("scope name is empty: %w", ErrInvalid)
	}
	if len(name) > maxNameLen {
		return fmt.Errorf("scope name %.32q... is longer than %d bytes: %w", name, maxNameLen, ErrInvalid)
	}
	if i := strings.IndexFunc(name, badScopeRune); i >= 0 {
		return fmt.Errorf("scope name %q has %q at byte %d; whitespace, control characters and braces are not allowed: %w", name, []rune(name[i:])[0], i, ErrInvalid)
	}
	return nil
}

func badScopeRune(r rune) bool {
	return unicode.IsSpace(r) || unicode.IsControl(r) || r == '{' || r == '}' || r == unicode.ReplacementChar
}

func validateHolder(holder string) error {
	if holder == "" {
		return fmt.Errorf("holder is empty: %w", ErrInvalid)
	}
	if len(holder) > maxNameLen {
		return fmt.Errorf("holder %.32q... is longer than %d bytes: %w", holder, maxNameLen, ErrInvalid)
	}
	return nil
}

func validateTTL(ttl time.Duration) error {
	if ttl < time.Millisecond {
		return fmt.Errorf("lease TTL %s is under 1ms: %w", ttl, ErrInvalid)
	}
	return nil
}
