package main

import (
	"encoding/base64"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/aivedio/pipeline/shared/envelope"
	"github.com/aivedio/pipeline/shared/preview"
	"github.com/aivedio/pipeline/shared/quarantine"
	"github.com/aivedio/pipeline/shared/replay"
)

// The human-readable output of the quarantine and replay commands: tables
// for people; --json prints the same data for scripts.

func table(out io.Writer) *tabwriter.Writer { return tabwriter.NewWriter(out, 0, 4, 2, ' ', 0) }

func stamp(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format("2006-01-02 15:04:05Z")
}

func stampPtr(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return stamp(*t)
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// clip shortens s to n runes for a table cell.
func clip(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}

func printList(out io.Writer, msgs []quarantine.Message, f quarantine.Filter) {
	if len(msgs) == 0 {
		fmt.Fprintln(out, "no quarantined messages match")
		return
	}
	w := table(out)
	now := time.Now()
	fmt.Fprintln(w, "QUARANTINE ID\tFIRST FAILED\tCONSUMER\tOWNER\tDUE\tCATEGORY\tEVENT TYPE\tEVENT ID\tERROR\tCOUNT\tSTATUS")
	for _, m := range msgs {
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\n", m.QuarantineID, stamp(m.FirstFailedAt), m.Consumer,
			dash(m.Owner), due(m, now), m.Category, dash(m.EventType), dash(m.EventID), errorOf(m), m.DeliveryCount, m.Status)
	}
	_ = w.Flush()
	fmt.Fprintf(out, "\n%d message(s)", len(msgs))
	if f.Limit > 0 && len(msgs) == f.Limit {
		fmt.Fprintf(out, " (the limit: narrow the filter or raise --limit)")
	}
	fmt.Fprintln(out, "\ninspect one:    go run ./adapter quarantine show <quarantine id>")
	fmt.Fprintln(out, "dry-run replay: go run ./adapter replay --event <quarantine id or event id> --dry-run")
	fmt.Fprintln(out, "discard:        go run ./adapter quarantine discard <quarantine id> --ticket T --reason R")
}

// due is a message's handling deadline, flagged once it has passed.
func due(m quarantine.Message, now time.Time) string {
	switch {
	case m.DueAt.IsZero() || m.Status != quarantine.Quarantined:
		return "-"
	case m.Overdue(now):
		return stamp(m.DueAt) + " OVERDUE"
	}
	return stamp(m.DueAt)
}

// errorOf is a row's error, with the handler's own for a dead letter.
func errorOf(m quarantine.Message) string {
	if m.LastErrorCode != "" {
		return m.ErrorClass + " " + m.ErrorCode + " (" + m.LastErrorCode + ")"
	}
	return m.ErrorClass + " " + m.ErrorCode
}

// printMessageDetail prints a message; its body only when withBody, since
// a body may hold what the redacted snapshot leaves out.
func printMessageDetail(out io.Writer, q replay.MessageDetail, withBody bool) {
	printMessage(out, q.Message)
	w := table(out)
	fmt.Fprintln(out, "\nPROPERTIES")
	for _, k := range slices.Sorted(maps.Keys(q.Properties)) {
		fmt.Fprintf(w, "  %s\t%s\n", k, q.Properties[k])
	}
	_ = w.Flush()
	if withBody {
		fmt.Fprintf(out, "\nBODY (%s)\n  %s\n", q.BodyEncoding, q.Body)
	} else {
		fmt.Fprintf(out, "\nBODY\n  %d bytes (%s); the snapshot above is redacted; --body prints it whole, secrets included\n", bodySize(q), q.BodyEncoding)
	}
	if q.Event != nil {
		printEvent(out, q.Event)
	} else {
		fmt.Fprintf(out, "\nEVENT\n  not readable: %s\n", q.EventError)
	}
	fmt.Fprintln(out, "\nREPLAYS")
	if len(q.Replays) == 0 {
		fmt.Fprintln(out, "  none")
		return
	}
	w = table(out)
	fmt.Fprintln(w, "  REPLAY ID\tSTATUS\tTICKET\tOPERATOR\tCREATED\tEXECUTED\tREPLAY EVENT\tAPPLIED")
	for _, r := range q.Replays {
		ev := "-"
		if r.ReplayEventID != nil {
			ev = r.ReplayEventID.String()
		}
		fmt.Fprintf(w, "  %s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.ReplayID, r.Status, r.Ticket, r.Operator, stamp(r.CreatedAt), stampPtr(r.ExecutedAt), ev, applied(r.After))
	}
	_ = w.Flush()
	for _, r := range q.Replays {
		if a := r.After; a != nil {
			fmt.Fprintf(out, "\nAFTER replay %s (%s at %s)\n", r.ReplayID, a.Result, stamp(a.AppliedAt))
			if a.Task != nil {
				fmt.Fprintf(out, "  task %s v%d; before it was %s v%d\n", a.Task.Status, a.Task.Version, dash(a.BeforeStatus), a.BeforeVersion)
			} else {
				fmt.Fprintf(out, "  %s\n", a.Note)
			}
			if res := a.Effects.Reservation; res != nil {
				fmt.Fprintf(out, "  reservation %s, %d ledger row(s), %d attempt(s), %d asset(s)\n", res.Status, len(a.Effects.Ledger), len(a.Effects.Attempts), len(a.Effects.Assets))
			}
		}
	}
}

func printMessage(out io.Writer, m quarantine.Message) {
	w := table(out)
	fmt.Fprintln(w, "MESSAGE")
	fmt.Fprintf(w, "  quarantine id\t%s (%s)\n", m.QuarantineID, m.Status)
	fmt.Fprintf(w, "  consumer\t%s\n", m.Consumer)
	fmt.Fprintf(w, "  topic / tag\t%s / %s\n", m.Topic, dash(m.Tag))
	fmt.Fprintf(w, "  event\t%s %s\n", dash(m.EventID), dash(m.EventType))
	fmt.Fprintf(w, "  error\t%s %s\n", m.ErrorClass, m.ErrorCode)
	if m.ErrorDetail != "" {
		fmt.Fprintf(w, "  detail\t%s\n", clip(m.ErrorDetail, 300))
	}
	if m.LastErrorCode != "" {
		fmt.Fprintf(w, "  handler's last error\t%s: %s\n", m.LastErrorCode, clip(m.LastError, 300))
	}
	fmt.Fprintf(w, "  category\t%s\n", m.Category)
	fmt.Fprintf(w, "  owner / due\t%s / %s\n", dash(m.Owner), due(m, time.Now()))
	fmt.Fprintf(w, "  failures\t%d, first %s, last %s\n", m.DeliveryCount, stamp(m.FirstFailedAt), stamp(m.LastFailedAt))
	fmt.Fprintf(w, "  delivery\tattempt %d, quarantined by %s at %s, message id %s, key %s\n", m.DeliveryAttempt, m.Source, stamp(m.ReceivedAt), m.MessageID, dash(m.MessageKey))
	fmt.Fprintf(w, "  payload\tschema %s, sha256 %s\n", schemaOf(m.SchemaVersion), m.PayloadHash)
	if len(m.Snapshot) > 0 {
		fmt.Fprintf(w, "  snapshot\t%s\n", clip(string(m.Snapshot), 500))
	}
	if d := m.Discard; d != nil {
		fmt.Fprintf(w, "  discarded\t%s by %s under %s: %s\n", stamp(d.At), d.Operator, d.Ticket, d.Reason)
	}
	_ = w.Flush()
}

func schemaOf(v int) string {
	if v == 0 {
		return "-"
	}
	return fmt.Sprint(v)
}

func printEvent(out io.Writer, e *envelope.Envelope) {
	w := table(out)
	fmt.Fprintln(w, "\nEVENT")
	fmt.Fprintf(w, "  id / type\t%s %s (schema %d)\n", e.EventID, e.EventType, e.SchemaVersion)
	fmt.Fprintf(w, "  producer\t%s, occurred %s\n", e.Producer, stamp(e.OccurredAt))
	fmt.Fprintf(w, "  aggregate\t%s %s\n", e.AggregateType, e.AggregateID)
	fmt.Fprintf(w, "  tenant\t%s\n", e.TenantID)
	fmt.Fprintf(w, "  correlation / causation\t%s / %s\n", dash(e.CorrelationID), dash(e.CausationID))
	fmt.Fprintf(w, "  payload\t%s (redacted; quarantine show --body prints the message whole)\n", quarantine.Snapshot(e.Payload))
	_ = w.Flush()
}

func printReport(out io.Writer, r replay.Report) {
	fmt.Fprintf(out, "REPLAY %s  %s  (planned %s)\n\n", r.ReplayID, r.Status, stamp(r.PlannedAt))
	printMessage(out, r.Message)
	if len(r.Copies) > 0 {
		fmt.Fprintf(out, "  copies          %d more quarantine row(s) of this event, replayed with it: %v\n", len(r.Copies), r.Copies)
	}
	if r.Event != nil {
		printEvent(out, r.Event)
	} else {
		fmt.Fprintf(out, "\nEVENT\n  not readable: %s\n", r.EventError)
	}
	if t := r.Task; t != nil {
		fmt.Fprintf(out, "\nTASK %s  %s v%d  progress %d%%", t.TaskID, t.Status, t.Version, t.Progress)
		if t.ProviderJobID != "" {
			fmt.Fprintf(out, "  job %s/%s", t.Provider, t.ProviderJobID)
		}
		if t.CancelRequested {
			fmt.Fprint(out, "  cancel requested")
		}
		fmt.Fprintf(out, "  updated %s\n", stamp(t.UpdatedAt))
		w := table(out)
		fmt.Fprintln(w, "  VERSION\tFROM\tTO\tREASON\tCAUSED BY\tAT")
		for _, e := range t.Timeline {
			fmt.Fprintf(w, "  v%d\t%s\t%s\t%s\t%s\t%s\n", e.Version, dash(e.From), e.To, clip(dash(e.Reason), 40), dash(e.EventID), stamp(e.At))
		}
		_ = w.Flush()
	}
	printEffects(out, r.Effects)
	if len(r.PriorReplays) > 0 {
		fmt.Fprintln(out, "\nEARLIER REPLAYS OF THIS EVENT TO THIS CONSUMER")
		w := table(out)
		for _, p := range r.PriorReplays {
			fmt.Fprintf(w, "  %s\t%s\tticket %s\tby %s\t%s\t%s\n", p.ReplayID, p.Status, p.Ticket, p.Operator, stamp(p.CreatedAt), dash(p.ReplayEventID))
		}
		_ = w.Flush()
	}
	if d := r.Target; d != nil {
		fmt.Fprintf(out, "\nA REPLAY GOES TO\n  topic %s, tag %s", d.Topic, d.Tag)
		if d.MessageGroup != "" {
			fmt.Fprintf(out, ", message group %s", d.MessageGroup)
		}
		if d.Delayed {
			fmt.Fprint(out, " (DELAY topic, due at once)")
		}
		fmt.Fprintf(out, "  [from the %s]\n", map[string]string{"outbox": "original outbox row", "quarantine": "topic it was read from", "catalog": "consumer group's subscription"}[d.From])
		fmt.Fprintln(out, "  as a new event id whose causation_id is the original; via the outbox and the relay")
		if len(d.AlsoConsumedBy) > 0 {
			fmt.Fprintf(out, "  also received by: %s\n", strings.Join(d.AlsoConsumedBy, ", "))
		}
	}
	if !r.EventTime.IsZero() {
		fmt.Fprintf(out, "\nAGE\n  made %s (by %s), %s ago; replay window (REPLAY_WINDOW) %s\n", stamp(r.EventTime),
			map[string]string{replay.TimeFromEventID: "its UUIDv7 id", replay.TimeFromOutbox: "its outbox row", replay.TimeFromQuarantine: "its quarantine row"}[r.EventTimeFrom],
			r.PlannedAt.Sub(r.EventTime).Round(time.Minute), r.ReplayWindow)
	}
	fmt.Fprintf(out, "\nVERDICT  %s  (%s)\n  %s\n", r.Verdict.Action, r.Verdict.Code, r.Verdict.Reason)
	if r.Status == replay.StatusDryRun && r.Verdict.Action != preview.Refuse {
		fmt.Fprintf(out, "\napprove it: go run ./adapter replay --plan %s --approve --ticket T --operator O --reason R\n", r.ReplayID)
	}
}

func printEffects(out io.Writer, e preview.Effects) {
	fmt.Fprintln(out, "\nSIDE EFFECTS ALREADY DONE")
	w := table(out)
	if len(e.Attempts) == 0 {
		fmt.Fprintln(w, "  provider attempts\tnone")
	}
	for _, a := range e.Attempts {
		fmt.Fprintf(w, "  attempt #%d\t%s at %s, remote job %s, key %s, created %s\n", a.AttemptNo, a.Status, a.Provider,
			dash(a.ProviderJobID), a.IdempotencyKey, stamp(a.CreatedAt))
	}
	if len(e.Assets) == 0 {
		fmt.Fprintln(w, "  assets\tnone")
	}
	for _, a := range e.Assets {
		fmt.Fprintf(w, "  asset %s\t%s %s, %d bytes\n", a.AssetID, a.Kind, a.ObjectKey, a.SizeBytes)
	}
	if r := e.Reservation; r != nil {
		fmt.Fprintf(w, "  reservation\t%s: %d credits %s (made %s, settled %s)\n", r.ReservationID, r.Amount, r.Status, stamp(r.CreatedAt), stampPtr(r.SettledAt))
	} else {
		fmt.Fprintln(w, "  reservation\tnone")
	}
	if len(e.Ledger) == 0 {
		fmt.Fprintln(w, "  ledger\tno rows")
	}
	for _, l := range e.Ledger {
		fmt.Fprintf(w, "  ledger\t%s/%s: %+d credits, balance after %d, at %s\n", l.Type, l.BusinessID, l.Amount, l.BalanceAfter, stamp(l.CreatedAt))
	}
	if i := e.Inbox; i != nil {
		fmt.Fprintf(w, "  inbox\t%s recorded the original event as %s at %s\n", i.Consumer, i.Result, stamp(i.ProcessedAt))
	} else {
		fmt.Fprintln(w, "  inbox\tthe consumer never committed the original event")
	}
	_ = w.Flush()
}

func printExecution(out io.Writer, x replay.Execution) {
	if x.AlreadyExecuted {
		fmt.Fprintf(out, "replay %s was executed already at %s; nothing was written now\n", x.ReplayID, stamp(x.ExecutedAt))
	} else {
		fmt.Fprintf(out, "replay %s executed at %s\n", x.ReplayID, stamp(x.ExecutedAt))
	}
	w := table(out)
	fmt.Fprintf(w, "  original event\t%s\n", x.OriginalEventID)
	fmt.Fprintf(w, "  replay event\t%s\n", x.ReplayEventID)
	fmt.Fprintf(w, "  consumer\t%s\n", x.Consumer)
	fmt.Fprintf(w, "  topic / tag\t%s / %s\n", x.Target.Topic, dash(x.Target.Tag))
	if x.Target.MessageGroup != "" {
		fmt.Fprintf(w, "  message group\t%s\n", x.Target.MessageGroup)
	}
	if x.Verdict.Action != "" {
		fmt.Fprintf(w, "  verdict then\t%s (%s)\n", x.Verdict.Action, x.Verdict.Code)
	}
	if !x.AlreadyExecuted {
		fmt.Fprintf(w, "  quarantine rows\t%d marked REPLAYED\n", x.QuarantineReplayed)
	}
	_ = w.Flush()
	if !x.AlreadyExecuted {
		fmt.Fprintln(out, "the event is in the outbox; the relay publishes it")
	}
}

func printBulk(out io.Writer, b replay.BulkReport, approved bool) {
	f := b.Filter
	fmt.Fprintf(out, "BULK %s  consumer %s", map[bool]string{false: "DRY RUN", true: "APPROVAL under ticket " + b.Ticket}[approved], f.Consumer)
	if f.ErrorClass != "" {
		fmt.Fprintf(out, "  class %s", f.ErrorClass)
	}
	if f.ErrorCode != "" {
		fmt.Fprintf(out, "  code %s", f.ErrorCode)
	}
	if !f.Since.IsZero() || !f.Until.IsZero() {
		fmt.Fprintf(out, "  received %s .. %s", stamp(f.Since), stamp(f.Until))
	}
	fmt.Fprintf(out, "\n\n%d open quarantine row(s), %d message(s) (copies of one event count once), %d planned (limit %d)\n",
		b.Matched, b.Messages, b.Planned, f.Limit)
	fmt.Fprintf(out, "would act: %d   stale no-op: %d   refused: %d\n", b.Counts[preview.Act], b.Counts[preview.StaleNoop], b.Counts[preview.Refuse])
	if approved {
		fmt.Fprintf(out, "approved: %d   refused (REJECTED): %d   approved before under this ticket: %d\n", b.Approved, b.Rejected, b.AlreadyApproved)
	}
	if len(b.Items) > 0 {
		fmt.Fprintln(out)
		w := table(out)
		header := "QUARANTINE ID\tEVENT ID\tTASK\tSTATE\tVERDICT\tCODE\tREASON"
		if approved {
			header += "\tAPPROVAL"
		}
		fmt.Fprintln(w, header)
		for _, it := range b.Items {
			state := "-"
			if it.TaskStatus != "" {
				state = fmt.Sprintf("%s v%d", it.TaskStatus, it.TaskVersion)
			}
			line := fmt.Sprintf("%s\t%s\t%s\t%s\t%s\t%s\t%s", it.QuarantineID, dash(it.EventID), dash(it.TaskID), state,
				it.Verdict.Action, it.Verdict.Code, clip(it.Verdict.Reason, 70))
			if approved {
				id := "-"
				if it.ReplayID != nil {
					id = it.ReplayID.String()
				}
				line += "\t" + it.Status + " " + id
			}
			fmt.Fprintln(w, line)
		}
		_ = w.Flush()
	}
	if !approved && b.Planned > 0 {
		fmt.Fprintf(out, "\napprove them: go run ./adapter replay --bulk --consumer %s [same filters] --approve --ticket T --operator O --reason R --expect %d\n", f.Consumer, b.Messages)
	}
	if approved && b.Approved+b.AlreadyApproved > 0 {
		fmt.Fprintf(out, "\nexecute them: go run ./adapter replay --bulk --execute-ticket %s\n", b.Ticket)
	}
}

func printBulkExecution(out io.Writer, x replay.BulkExecution) {
	fmt.Fprintf(out, "ticket %s: %d executed now, %d executed before, %d refused, %d failed\n",
		x.Ticket, len(x.Executed), x.AlreadyExecuted, len(x.Refused), len(x.Failed))
	if len(x.Executed) > 0 {
		w := table(out)
		fmt.Fprintln(w, "\nREPLAY ID\tORIGINAL EVENT\tREPLAY EVENT\tTOPIC\tVERDICT")
		for _, e := range x.Executed {
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", e.ReplayID, e.OriginalEventID, e.ReplayEventID, e.Target.Topic, e.Verdict.Action)
		}
		_ = w.Flush()
	}
	for _, f := range x.Refused {
		fmt.Fprintf(out, "refused %s: %s\n", f.ReplayID, f.Reason)
	}
	for _, f := range x.Failed {
		fmt.Fprintf(out, "failed  %s: %s\n", f.ReplayID, f.Reason)
	}
}

// applied is a replay's after cell: not yet, or what its consumer did.
func applied(a *replay.After) string {
	if a == nil {
		return "-"
	}
	return a.Result + " " + stamp(a.AppliedAt)
}

// bodySize is the size of a message's body as stored.
func bodySize(q replay.MessageDetail) int {
	if q.BodyEncoding == "base64" {
		return base64.StdEncoding.DecodedLen(len(q.Body))
	}
	return len(q.Body)
}
