package inbox_test

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/aivedio/pipeline/shared/catalog"
	"github.com/aivedio/pipeline/shared/envelope"
	"github.com/aivedio/pipeline/shared/inbox"
	"github.com/aivedio/pipeline/shared/outbox"
	"github.com/aivedio/pipeline/shared/outcome"
)

// A stage applies an event once: its versioned transition, the events it
// causes and the inbox record commit together, and a redelivery changes
// nothing.
func ExampleDo() {
	var (
		ctx  = context.Background()
		pool *pgxpool.Pool     // the stage's pool
		ev   envelope.Envelope // from envelope.FromCloudEvent
	)
	var p struct {
		TaskID  string `json:"task_id"`
		Version int    `json:"version"`
	}
	if err := json.Unmarshal(ev.Payload, &p); err != nil {
		_ = outcome.Permanent("payload.malformed", err) // returned to the adapter: quarantined
		return
	}

	out, err := inbox.Do(ctx, pool, catalog.GroupFetch.Name, ev, func(ctx context.Context, tx pgx.Tx) (inbox.Result, error) {
		tag, err := tx.Exec(ctx, `UPDATE generation_tasks SET status = 'MEDIA_PROCESSING', version = version + 1
			WHERE task_id = $1 AND status = 'FETCHING' AND version = $2`, p.TaskID, p.Version)
		if err != nil {
			return "", err
		}
		if tag.RowsAffected() == 0 {
			return inbox.StaleNoop, nil // an older event: the task has moved on
		}
		probe, err := envelope.New(envelope.NewParams{
			EventType: catalog.EventPostprocess, Producer: "fetch",
			AggregateType: ev.AggregateType, AggregateID: ev.AggregateID, TenantID: ev.TenantID,
			CausationID: ev.EventID, CorrelationID: ev.CorrelationID, TraceID: ev.TraceID,
			Payload: map[string]any{"task_id": p.TaskID, "version": p.Version + 1},
		})
		if err != nil {
			return "", err
		}
		return inbox.Applied, outbox.Write(ctx, tx, outbox.Event{Envelope: probe, Topic: catalog.AssetPostprocess, Tag: catalog.TagProbe})
	})
	if err != nil {
		return // nothing committed: the adapter retries or quarantines as outcome.Of(err) says
	}
	fmt.Println("done; duplicate:", out.Duplicate, "result:", out.Result) // the adapter ACKs
}
