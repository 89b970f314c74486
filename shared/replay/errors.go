package replay

import (
	"cmp"
	"errors"
	"fmt"
	"strings"
	"unicode"

	"github.com/aivedio/pipeline/shared/pg"
	"github.com/aivedio/pipeline/shared/preview"
	"github.com/aivedio/pipeline/shared/quarantine"
)

// Errors callers branch on. Every error of this package that a person
// caused wraps one of them and says what to do; any other error is an
// infrastructure failure.
var (
	// ErrNotFound: no quarantined message or replay has that id.
	ErrNotFound = errors.New("not found")
	// ErrAmbiguous: an event id names quarantined messages of several
	// consumer groups; name the group or the quarantine id.
	ErrAmbiguous = quarantine.ErrAmbiguous
	// ErrNotOpen: the quarantined message was replayed or discarded already.
	ErrNotOpen = quarantine.ErrNotOpen
	// ErrInvalid: a parameter is missing or malformed.
	ErrInvalid = errors.New("invalid replay request")
	// ErrRefused: the verdict is a refusal; nothing is or will be sent.
	ErrRefused = errors.New("replay refused")
	// ErrNotApproved: the replay is a dry run that was never approved.
	ErrNotApproved = errors.New("replay not approved")
	// ErrDecided: the dry run was approved or refused already.
	ErrDecided = errors.New("replay already decided")
	// ErrChanged: the quarantine no longer matches what the bulk dry run
	// counted; nothing was approved.
	ErrChanged = errors.New("quarantine changed since the dry run")
	// ErrSamePlanner: the approval comes with the API key that planned the
	// replay; another key (another person) approves it.
	ErrSamePlanner = errors.New("replay approved by the key that planned it")
	// ErrOutsideWindow: the event is older than the replay window, so the
	// consumer's inbox may no longer know it; the replay is refused, and
	// the error wraps ErrRefused too.
	ErrOutsideWindow = errors.New("event outside the replay window")
)

// refusal is the error of a decision refused with verdict v; about, when
// not empty, says which earlier decision refused it.
func refusal(v preview.Verdict, about string) error {
	if v.Code == CodeOutsideWindow {
		return fmt.Errorf("%w: %w: %s%s", ErrRefused, ErrOutsideWindow, about, v.Reason)
	}
	return fmt.Errorf("%w: %s%s: %s", ErrRefused, about, v.Code, v.Reason)
}

func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...))
}

// DB is what the package runs on: a *pgxpool.Pool.
type DB = pg.DB

// querier reads: a pool or a transaction.
type querier = pg.Querier

// Limits of the words an operator records.
const (
	maxTicket   = 100
	maxOperator = 200
	maxReason   = 1000
)

// Decision is who approves a replay, under which ticket, and why.
type Decision struct {
	Ticket   string `json:"ticket"`
	Operator string `json:"operator"`
	Reason   string `json:"reason"`
}

func (d Decision) validate() error {
	if err := cmp.Or(
		checkWord("ticket", d.Ticket, maxTicket),
		checkWord("operator", d.Operator, maxOperator),
		checkWord("reason", d.Reason, maxReason),
	); err != nil {
		return err
	}
	if strings.EqualFold(strings.TrimSpace(d.Ticket), NoTicket) {
		return invalidf("ticket %q is what a dry run records; approve under the real ticket", NoTicket)
	}
	return nil
}

// checkWord refuses a blank, overlong or control-character value of an
// audit field: what is recorded must be readable by the next person.
func checkWord(name, v string, limit int) error {
	switch {
	case strings.TrimSpace(v) == "":
		return invalidf("%s is required", name)
	case len(v) > limit:
		return invalidf("%s is longer than %d bytes", name, limit)
	case strings.IndexFunc(v, unicode.IsControl) >= 0:
		return invalidf("%s must not contain control characters", name)
	}
	return nil
}
