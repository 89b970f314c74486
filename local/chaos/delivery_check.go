package main

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/aivedio/pipeline/shared/catalog"
	"github.com/aivedio/pipeline/shared/quarantine"
)

// This file holds the invariants of delivery: no outbox event left
// unpublished, every published event applied by each group that takes it
// (or quarantined), and every quarantine row explained.

func (w *world) checkOutbox(ctx context.Context, r *report) error {
	var unpublished, total int
	if err := w.pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE published_at IS NULL), count(*) FROM outbox_events`).Scan(&unpublished, &total); err != nil {
		return err
	}
	r.add("no outbox row stuck", unpublished == 0, "%d of %d rows unpublished", unpublished, total)
	return nil
}

// inboxWait bounds the wait for the last consumers of events already due.
const inboxWait = time.Minute

// checkInbox proves each published event was applied by each consumer
// group that takes it: a row in that group's inbox (the inbox's key makes
// it once), or a quarantine row that says why not. notify keeps no inbox:
// its effect is a publish to Redis, at most once by design (the stream
// client drops repeats by version), so it is left out. An event still due
// in the future (a delayed poll of a task that ended meanwhile) is not yet
// anyone's to apply and is counted apart. So is a render chunk ask the
// render stage acknowledged without an inbox row by design (another
// delivery held the chunk's claim, or its own claim ran out while it was
// paused) whose render SUCCEEDED: that chunk's effect was recorded under
// the ask that claimed it (see heldChunkAsks).
func (w *world) checkInbox(ctx context.Context, r *report) error {
	deadline := time.Now().Add(inboxWait)
	for {
		missing, checked, future, held, err := w.inboxGaps(ctx)
		if err != nil {
			return err
		}
		if len(missing) == 0 || time.Now().After(deadline) {
			r.add("every published event applied once by each of its consumer groups", len(missing) == 0,
				"%d deliveries checked against the inbox and the quarantine (notify, which keeps no inbox, left out; %d still due later; %s)%s",
				checked, future, heldChunkNote(held), firstOf(missing))
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(2 * time.Second):
		}
	}
}

func (w *world) inboxGaps(ctx context.Context) (missing []string, checked, future, held int, err error) {
	seen := map[string]bool{}
	rows, err := w.pool.Query(ctx, `SELECT consumer_name || '/' || event_id FROM inbox_dedup
		UNION SELECT consumer_name || '/' || event_id FROM message_quarantine WHERE event_id IS NOT NULL`)
	if err != nil {
		return nil, 0, 0, 0, err
	}
	var k string
	if _, err := pgx.ForEachRow(rows, []any{&k}, func() error { seen[k] = true; return nil }); err != nil {
		return nil, 0, 0, 0, err
	}
	heldChunks, err := w.heldChunkAsks(ctx)
	if err != nil {
		return nil, 0, 0, 0, err
	}
	rows, err = w.pool.Query(ctx, `SELECT event_id::text, topic, tag, coalesce(deliver_at > now() - interval '5 seconds', false)
		FROM outbox_events WHERE published_at IS NOT NULL`)
	if err != nil {
		return nil, 0, 0, 0, err
	}
	var id, topic, tag string
	var later bool
	_, err = pgx.ForEachRow(rows, []any{&id, &topic, &tag, &later}, func() error {
		t, ok := catalog.TopicByName(topic)
		if !ok {
			missing = append(missing, fmt.Sprintf("event %s on unknown topic %s", id, topic))
			return nil
		}
		for _, g := range catalog.Groups() {
			if g.Name == catalog.GroupNotify.Name || !g.Takes(t, tag) {
				continue
			}
			if later {
				future++
				continue
			}
			checked++
			switch {
			case seen[g.Name+"/"+id]:
			case g.Name == catalog.GroupRender.Name && heldChunks[id]:
				held++
			default:
				missing = append(missing, fmt.Sprintf("%s never applied %s (%s %s)", g.Name, id, topic, tag))
			}
		}
		return nil
	})
	return missing, checked, future, held, err
}

// checkQuarantine explains every quarantine row. Under these faults the
// only explainable poison is a dead letter whose handler kept failing on a
// dependency (DEPENDENCY, with the handler's last error recorded), or an event that
// is no event of this run's (left on the shared broker by an earlier run,
// so its task is not in this database). A code defect, data defect or
// permission refusal is a bug: no such input was injected.
func (w *world) checkQuarantine(ctx context.Context, r *report) error {
	msgs, err := quarantine.List(ctx, w.pool, quarantine.Filter{Status: quarantine.AnyStatus, Limit: quarantine.MaxLimit})
	if err != nil {
		return err
	}
	ours := map[string]bool{}
	rows, err := w.pool.Query(ctx, `SELECT event_id::text FROM outbox_events`)
	if err != nil {
		return err
	}
	var id string
	if _, err := pgx.ForEachRow(rows, []any{&id}, func() error { ours[id] = true; return nil }); err != nil {
		return err
	}
	var unexplained []string
	byWhy := map[string]int{}
	for _, m := range msgs {
		switch {
		case m.EventID != "" && !ours[m.EventID]:
			byWhy["an earlier run's event"]++
		case m.Category == quarantine.Dependency && m.LastErrorCode != "":
			byWhy[fmt.Sprintf("dead letter (%s) of %s", m.LastErrorCode, m.Consumer)]++
		default:
			unexplained = append(unexplained, fmt.Sprintf("%s %s %s %s: %s", m.Consumer, m.Category, m.ErrorCode, m.EventID, m.ErrorDetail))
		}
	}
	// An earlier run that broke (and so left its messages on the shared
	// broker) can quarantine many rows here; only this run's must all be
	// looked at.
	var total, thisRun int
	if err := w.pool.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE q.event_id IS NULL
			OR EXISTS (SELECT 1 FROM outbox_events o WHERE o.event_id::text = q.event_id::text))
		FROM message_quarantine q`).Scan(&total, &thisRun); err != nil {
		return err
	}
	listed := 0
	for _, m := range msgs {
		if m.EventID == "" || ours[m.EventID] {
			listed++
		}
	}
	if thisRun > listed {
		unexplained = append(unexplained, fmt.Sprintf("%d rows of this run's events, %d of them not looked at: far more poison than these faults make", thisRun, thisRun-listed))
	}
	if total > len(msgs) {
		byWhy["an earlier run's event"] += total - len(msgs) - (thisRun - listed)
	}
	detail := fmt.Sprintf("%d rows", total)
	for _, why := range slices.Sorted(maps.Keys(byWhy)) {
		detail += fmt.Sprintf("; %s ×%d", why, byWhy[why])
	}
	r.add("every quarantine row explained", len(unexplained) == 0, "%s%s", detail, firstOf(unexplained))
	return nil
}
