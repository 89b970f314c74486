package preview

import "fmt"

// Action is what a replay would lead to.
type Action string

// The actions of a [Verdict].
const (
	// Act: the consumer would do its work for the event (and, thanks to the
	// business keys, only the part not done yet).
	Act Action = "ACT"
	// StaleNoop: the task has moved past the event; the consumer would
	// record it as STALE_NOOP and change nothing. Replaying it is harmless
	// and clears the quarantine.
	StaleNoop Action = "STALE_NOOP"
	// Refuse: the replay would fail again or must never be sent; it is not
	// approved and never executed.
	Refuse Action = "REFUSED"
)

// Verdict is what a replay would do now, and why.
type Verdict struct {
	Action Action `json:"action"`
	// Code is a short stable reason, e.g. "submit.stale" or
	// "security.tenant_mismatch".
	Code   string `json:"code"`
	Reason string `json:"reason"`
}

// Because is the verdict a with a stable code and the reason a person
// reads: preview.StaleNoop.Because("fetch.stale", "the task is %s", ...).
func (a Action) Because(code, format string, args ...any) Verdict {
	return Verdict{Action: a, Code: code, Reason: fmt.Sprintf(format, args...)}
}

// Refusal is a refusal as an error, for a rule's taskOf: the plan ends
// with that verdict.
func Refusal(code, format string, args ...any) error {
	return refusal(Refuse.Because(code, format, args...))
}

// refusal is a verdict that ends the plan early.
type refusal Verdict

func (r refusal) Error() string { return r.Reason }
