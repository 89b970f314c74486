package slots

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"
)

// DefaultKeyPrefix prefixes every scope's Redis key unless [Opts] says
// otherwise.
const DefaultKeyPrefix = "aivedio:slots:"

// Opts are the optional knobs of a [Limiter]; a nil *Opts means defaults.
type Opts struct {
	// KeyPrefix is prepended to scope names to form Redis keys. Default
	// [DefaultKeyPrefix]. Under Redis Cluster it must contain a hash tag.
	KeyPrefix string
}

// Limiter hands out concurrency slots kept in Redis. It is safe for
// concurrent use and holds no state of its own: any number of processes may
// share the same scopes through the same Redis and key prefix.
type Limiter struct {
	client redis.UniversalClient
	prefix string
}

// New returns a Limiter over client. The caller owns the client and closes it.
func New(client redis.UniversalClient, opts *Opts) *Limiter {
	if client == nil {
		panic("slots: New needs a Redis client")
	}
	prefix := DefaultKeyPrefix
	if opts != nil && opts.KeyPrefix != "" {
		prefix = opts.KeyPrefix
	}
	return &Limiter{client: client, prefix: prefix}
}

// Acquire takes one slot for p.Holder in every scope of p.Scopes, atomically:
// either all of them or, when any scope is full, none, and the error is a
// [*FullError] matching [ErrNoSlot] that names the full scope. Expired
// leases are dropped first, so a crashed holder's slot is available again
// once its TTL has passed.
//
// Acquiring again with a holder that already holds a scope renews its lease
// there instead of taking a second slot.
func (l *Limiter) Acquire(ctx context.Context, p AcquireParams) (Lease, error) {
	return l.acquire(ctx, Lease{}, p)
}

// Handoff releases freed and acquires p in one atomic step: the slot freed
// goes to p.Holder, never to a holder that acquires in between. When a
// scope of p is full even so, freed is released all the same and the error
// is Acquire's. A wait list hands a released slot to its best waiter with
// it.
func (l *Limiter) Handoff(ctx context.Context, freed Lease, p AcquireParams) (Lease, error) {
	if err := freed.validate(); err != nil {
		return Lease{}, err
	}
	return l.acquire(ctx, freed, p)
}

// acquire is Acquire after releasing freed, when it has a holder.
func (l *Limiter) acquire(ctx context.Context, freed Lease, p AcquireParams) (Lease, error) {
	if err := p.validate(); err != nil {
		return Lease{}, err
	}
	keys := make([]string, 0, len(p.Scopes)+len(freed.Scopes))
	names := make([]string, len(p.Scopes))
	args := make([]any, 0, 3+len(p.Scopes))
	args = append(args, p.Holder, p.TTL.Milliseconds(), freed.Holder)
	for i, s := range p.Scopes {
		keys = append(keys, l.key(s.Name))
		names[i] = s.Name
		args = append(args, s.Limit)
	}
	for _, name := range freed.Scopes {
		if !slices.Contains(names, name) {
			keys = append(keys, l.key(name))
		}
	}
	ok, scope, err := runLeaseScript(ctx, l.client, acquireScript, keys, args)
	if err != nil {
		return Lease{}, fmt.Errorf("acquire slots for %q: %w", p.Holder, err)
	}
	if !ok {
		return Lease{}, &FullError{Scope: p.Scopes[scope].Name, Limit: p.Scopes[scope].Limit}
	}
	return Lease{Holder: p.Holder, Scopes: names, TTL: p.TTL}, nil
}

// FullError is the refusal of a full scope: it matches [ErrNoSlot].
type FullError struct {
	Scope string
	Limit int
}

func (e *FullError) Error() string {
	return fmt.Sprintf("scope %q is at its limit of %d: %v", e.Scope, e.Limit, ErrNoSlot)
}

// Is makes a FullError match [ErrNoSlot].
func (e *FullError) Is(target error) bool { return target == ErrNoSlot }

// Renew extends lease by lease.TTL in every scope it holds. When the lease has
// expired in any scope (so its slot may have been taken) or a rebuild removed
// it, Renew returns an error matching [ErrLeaseLost] and removes the holder
// from the remaining scopes as well: a lost lease holds nothing.
func (l *Limiter) Renew(ctx context.Context, lease Lease) error {
	if err := lease.validate(); err != nil {
		return err
	}
	if err := validateTTL(lease.TTL); err != nil {
		return err
	}
	ok, scope, err := runLeaseScript(ctx, l.client, renewScript, l.keys(lease.Scopes), []any{lease.Holder, lease.TTL.Milliseconds()})
	if err != nil {
		return fmt.Errorf("renew slots of %q: %w", lease.Holder, err)
	}
	if !ok {
		return fmt.Errorf("renew slots of %q: scope %q: %w", lease.Holder, lease.Scopes[scope], ErrLeaseLost)
	}
	return nil
}

// Release frees the lease's slot in every scope. Releasing a lease that is
// already released, expired or lost succeeds. Call it with a context that
// outlives the job's own (context.WithoutCancel plus a timeout), so that
// cancellation does not keep a slot held until its TTL.
func (l *Limiter) Release(ctx context.Context, lease Lease) error {
	if err := lease.validate(); err != nil {
		return err
	}
	if err := releaseScript.Run(ctx, l.client, l.keys(lease.Scopes), lease.Holder).Err(); err != nil {
		return fmt.Errorf("release slots of %q: %w", lease.Holder, err)
	}
	return nil
}

// InUse counts the unexpired holders of one scope, by the Redis clock.
func (l *Limiter) InUse(ctx context.Context, scope string) (int, error) {
	if err := validateScope(scope); err != nil {
		return 0, err
	}
	n, err := inUseScript.Run(ctx, l.client, []string{l.key(scope)}).Int()
	if err != nil {
		return 0, fmt.Errorf("count holders of scope %q: %w", scope, err)
	}
	return n, nil
}

// Rebuild replaces every holder of scope with holders, each with a fresh lease
// of ttl, in one atomic step. The reconciler calls it with the task attempts
// PostgreSQL knows to be in flight. It does not apply a limit: if more holders
// are in flight than the scope's limit allows, Acquire refuses newcomers until
// enough of them release or expire. An empty holders list empties the scope.
func (l *Limiter) Rebuild(ctx context.Context, scope string, holders []string, ttl time.Duration) error {
	if err := validateScope(scope); err != nil {
		return err
	}
	if err := validateTTL(ttl); err != nil {
		return err
	}
	args := make([]any, 0, 1+len(holders))
	args = append(args, ttl.Milliseconds())
	for _, h := range holders {
		if err := validateHolder(h); err != nil {
			return fmt.Errorf("rebuild scope %q: %w", scope, err)
		}
		args = append(args, h)
	}
	if err := rebuildScript.Run(ctx, l.client, []string{l.key(scope)}, args...).Err(); err != nil {
		return fmt.Errorf("rebuild scope %q: %w", scope, err)
	}
	return nil
}

func (l *Limiter) key(scope string) string {
	return l.prefix + scope
}

func (l *Limiter) keys(scopes []string) []string {
	keys := make([]string, len(scopes))
	for i, s := range scopes {
		keys[i] = l.key(s)
	}
	return keys
}

// runLeaseScript runs the acquire or renew script, which answers {1, expiry}
// on success and {0, i} when scope i (1-based) refused; it returns the
// refusing scope's 0-based index.
func runLeaseScript(ctx context.Context, c redis.Scripter, s *redis.Script, keys []string, args []any) (ok bool, scope int, err error) {
	reply, err := s.Run(ctx, c, keys, args...).Int64Slice()
	if err != nil {
		return false, 0, err
	}
	if len(reply) != 2 {
		return false, 0, fmt.Errorf("unexpected script reply %v", reply)
	}
	if reply[0] == 1 {
		return true, 0, nil
	}
	i := int(reply[1]) - 1
	if i < 0 || i >= len(keys) {
		return false, 0, fmt.Errorf("unexpected script reply %v", reply)
	}
	return false, i, nil
}
