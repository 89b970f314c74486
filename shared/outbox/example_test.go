package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/aivedio/pipeline/shared/catalog"
	"github.com/aivedio/pipeline/shared/envelope"
	"github.com/aivedio/pipeline/shared/outbox"
)

// A state change and the events announcing it commit together, or not at all.
func ExampleWrite() {
	var (
		ctx  = context.Background()
		pool *pgxpool.Pool // the service's pool
	)
	const taskID, tenantID = "0193aa00-1111-7222-8333-444455556666", "0193aa00-0000-7000-8000-000000000042"

	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `UPDATE generation_tasks SET status = 'FETCHING', version = version + 1
			WHERE task_id = $1 AND status = 'PROVIDER_RUNNING' AND version = $2`, taskID, 3)
		if err != nil || tag.RowsAffected() == 0 {
			return err // stale: someone else moved the task; re-read and decide
		}
		fetch, err := envelope.New(envelope.NewParams{
			EventType: catalog.EventFetchRequested, Producer: "poll",
			AggregateType: "generation_task", AggregateID: taskID, TenantID: tenantID,
			Payload: map[string]any{"task_id": taskID, "version": 4},
		})
		if err != nil {
			return err
		}
		changed, err := envelope.New(envelope.NewParams{
			EventType: catalog.EventTaskStateChanged, Producer: "poll",
			AggregateType: "generation_task", AggregateID: taskID, TenantID: tenantID,
			CausationID: fetch.EventID,
			Payload:     map[string]any{"task_id": taskID, "status": "FETCHING", "version": 4},
		})
		if err != nil {
			return err
		}
		return outbox.Write(ctx, tx,
			outbox.Event{Envelope: fetch, Topic: catalog.AssetFetch},
			outbox.Event{Envelope: changed, Topic: catalog.GenerationStateFIFO, MessageGroup: taskID},
		)
	})
	if err != nil {
		return // nothing was written: neither the transition nor its events
	}
}

// Events are checked before anything is sent: a mistake names the event and
// the rule, and leaves the transaction usable.
func ExampleErrInvalidEvent() {
	e, _ := envelope.New(envelope.NewParams{
		EventID:       "01936d3c-5b7e-7c3a-9f1e-2b4c6d8e0a1f",
		EventType:     catalog.EventPollDue,
		Producer:      "submit",
		AggregateType: "generation_task",
		AggregateID:   "0193aa00-1111-7222-8333-444455556666",
		TenantID:      "0193aa00-0000-7000-8000-000000000042",
		Payload:       map[string]any{"task_id": "0193aa00-1111-7222-8333-444455556666"},
	})
	var tx pgx.Tx // never used: validation fails first

	err := outbox.Write(context.Background(), tx, outbox.Event{Envelope: e, Topic: catalog.GenerationPollDelay})
	fmt.Println(errors.Is(err, outbox.ErrInvalidEvent))
	fmt.Println(err)

	err = outbox.Write(context.Background(), tx, outbox.Event{
		Envelope: e, Topic: catalog.GenerationPollDelay, DeliverAt: time.Now().Add(30 * time.Second), MessageGroup: e.AggregateID,
	})
	fmt.Println(err)
	// Output:
	// true
	// invalid outbox event "01936d3c-5b7e-7c3a-9f1e-2b4c6d8e0a1f" (events[0]): deliver_at is required on DELAY topic "generation.poll.delay"
	// invalid outbox event "01936d3c-5b7e-7c3a-9f1e-2b4c6d8e0a1f" (events[0]): message_group is set but topic "generation.poll.delay" is DELAY; only FIFO topics take one
}
