package reconcile

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/aivedio/pipeline/shared/catalog"
)

// Rescues of a task are counted from its reconcile_repairs rows with
// rescue set, each naming the task_events row its touch wrote: a timeline
// row no rescue names is progress (anything else moved or touched the
// task). The statements below spell the producer 'reconcile' ([Name]) in
// their text so that the partial index on this producer's outbox rows
// (migration 13) serves them in every plan.

// rescueInFlight reports whether the rescuer's last re-emission for the
// task is published but not yet taken by any consumer group it goes to (no
// inbox or quarantine row): the stage is down or behind, which says nothing
// about the task, so re-emitting adds nothing and must not count as a round
// without progress. Past stuckAfter it counts as lost with a broker, and
// the task is rescued again.
func rescueInFlight(ctx context.Context, tx pgx.Tx, id uuid.UUID, stuckAfter time.Duration, now time.Time) (bool, error) {
	var eventID uuid.UUID
	var topicName, tag string
	// The step, not the task.state.changed the same touch wrote (notify
	// keeps no inbox, so that one would never look taken), and only a step
	// re-emitted since the task last moved: an old poll never taken says
	// nothing about a fetch.
	err := tx.QueryRow(ctx, `SELECT event_id, topic, tag FROM outbox_events
		WHERE aggregate_id = $1 AND producer = 'reconcile' AND event_type <> $3 AND published_at > $5::timestamptz - interval '1 millisecond' * $2
		  AND created_at >= coalesce((SELECT max(e.created_at) FROM task_events e WHERE e.task_id = $4
				AND NOT EXISTS (SELECT 1 FROM reconcile_repairs r WHERE r.aggregate_id = $1 AND r.rescue AND r.task_version = e.version)), '-infinity')
		ORDER BY created_at DESC, event_id DESC LIMIT 1`,
		id.String(), stuckAfter.Milliseconds(), catalog.EventTaskStateChanged, id, now).Scan(&eventID, &topicName, &tag)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("read last re-emission: %w", err)
	}
	took, err := taken(ctx, tx, eventID, topicName, tag)
	return !took, err
}

// taken reports whether an event reached a consumer group it goes to: the
// group's inbox holds it (handled) or its quarantine does (refused). An
// event on no known topic counts as taken: nobody will ever take it.
func taken(ctx context.Context, tx pgx.Tx, eventID uuid.UUID, topicName, tag string) (bool, error) {
	topic, ok := catalog.TopicByName(topicName)
	if !ok {
		return true, nil
	}
	var groups []string
	for _, g := range catalog.Groups() {
		if g.Takes(topic, tag) {
			groups = append(groups, g.Name)
		}
	}
	var took bool
	err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM inbox_dedup WHERE consumer_name = ANY($1) AND event_id = $2)
		OR EXISTS (SELECT 1 FROM message_quarantine WHERE consumer_name = ANY($1) AND event_id = $2)`, groups, eventID).Scan(&took)
	if err != nil {
		return false, fmt.Errorf("read whether event %s was taken: %w", eventID, err)
	}
	return took, nil
}

// roundsWithoutProgress counts the rescuer's re-emissions for a task,
// since anything else last moved or touched it, that reached their stage
// and changed nothing: the re-emitted step is in the inbox or the
// quarantine of a group it goes to. A re-emission nobody took (the broker
// down, the stage's consumers deaf, the stage failing on a store that is
// down, so nothing committed) proves nothing about the task and does not
// count, however often it is repeated.
func roundsWithoutProgress(ctx context.Context, tx pgx.Tx, id uuid.UUID) (int, error) {
	return takenRescues(ctx, tx, id, "", true)
}

// takenRescues counts the rescuer's rescues of a task (its rescue rows in
// reconcile_repairs) whose re-emitted step a stage took; eventType, when
// set, counts only re-emissions of that type; sinceProgress, only rescues
// since anything else last moved or touched the task. A rescue counts
// once, whichever of its events was taken.
//
// The lookup stage chains its own task.reconcile.due events under the same
// producer name; the rescuer's have no causing event. An event belongs to
// the last rescue written before it (its touch is written first, in the
// same transaction, and the rescue row carries the touch's time).
func takenRescues(ctx context.Context, tx pgx.Tx, id uuid.UUID, eventType string, sinceProgress bool) (int, error) {
	rows, err := tx.Query(ctx, `SELECT created_at FROM reconcile_repairs WHERE aggregate_id = $1 AND rescue
		AND (NOT $2 OR task_version > coalesce((SELECT max(e.version) FROM task_events e WHERE e.task_id = $3
				AND NOT EXISTS (SELECT 1 FROM reconcile_repairs r WHERE r.aggregate_id = $1 AND r.rescue AND r.task_version = e.version)), 0))
		ORDER BY created_at`, id.String(), sinceProgress, id)
	if err != nil {
		return 0, fmt.Errorf("read rescues: %w", err)
	}
	touches, err := pgx.CollectRows(rows, pgx.RowTo[time.Time])
	if err != nil || len(touches) == 0 {
		return 0, err
	}
	rows, err = tx.Query(ctx, `SELECT event_id, topic, tag, created_at FROM outbox_events
		WHERE aggregate_id = $1 AND producer = 'reconcile' AND coalesce(causation_id, '') = '' AND event_type <> $2
		  AND ($3 = '' OR event_type = $3) AND published_at IS NOT NULL AND created_at >= $4`,
		id.String(), catalog.EventTaskStateChanged, eventType, touches[0])
	if err != nil {
		return 0, fmt.Errorf("read re-emissions: %w", err)
	}
	type reEmission struct {
		ID         uuid.UUID
		Topic, Tag string
		At         time.Time
	}
	asks, err := pgx.CollectRows(rows, pgx.RowToStructByPos[reEmission])
	if err != nil {
		return 0, fmt.Errorf("read re-emissions: %w", err)
	}
	rounds := map[int]bool{}
	for _, a := range asks {
		round := sort.Search(len(touches), func(i int) bool { return touches[i].After(a.At) }) - 1
		if round < 0 || rounds[round] {
			continue
		}
		took, err := taken(ctx, tx, a.ID, a.Topic, a.Tag)
		if err != nil {
			return 0, err
		}
		if took {
			rounds[round] = true
		}
	}
	return len(rounds), nil
}
