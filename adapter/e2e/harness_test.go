//go:build !race

package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/functions/stage"
	"github.com/aivedio/pipeline/shared/catalog"
	"github.com/aivedio/pipeline/shared/envelope"
	"github.com/aivedio/pipeline/shared/inbox"
	"github.com/aivedio/pipeline/shared/outbox"
	"github.com/aivedio/pipeline/shared/outcome"
)

// payload is what the test events carry.
type payload struct {
	Run    string `json:"run"`
	Seq    int    `json:"seq"`
	Tenant string `json:"tenant,omitempty"` // when set and not the envelope's: a tenant mismatch
}

// createEffects adds the table the test stage writes its one effect per
// event to. No unique key on purpose: a duplicate effect must show.
func createEffects(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	_, err := pool.Exec(context.Background(), `CREATE TABLE effects (event_id uuid NOT NULL, seq int NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())`)
	require.NoError(t, err)
}

// effectStage is a stage whose work is one effect row per event inside the
// inbox transaction. Events of other runs (left on a shared broker by
// earlier runs) are stale no-ops.
func effectStage(pool *pgxpool.Pool, consumer, eventType, run string) *stage.Function {
	return stage.New(stage.Params{
		Name:       "effect",
		EventTypes: []string{eventType},
		Work: func(ctx context.Context, ev envelope.Envelope) error {
			var p payload
			if err := json.Unmarshal(ev.Payload, &p); err != nil {
				return outcome.Permanent("payload.malformed", err)
			}
			if p.Run == run && p.Tenant != "" && p.Tenant != ev.TenantID {
				return outcome.Permanentf("security.tenant_mismatch", "event tenant %s does not own the task", ev.TenantID)
			}
			_, err := inbox.Do(ctx, pool, consumer, ev, func(ctx context.Context, tx pgx.Tx) (inbox.Result, error) {
				if p.Run != run {
					return inbox.StaleNoop, nil
				}
				_, err := tx.Exec(ctx, `INSERT INTO effects (event_id, seq) VALUES ($1, $2)`, ev.EventID, p.Seq)
				return inbox.Applied, err
			})
			return err
		},
	})
}

// newEvent builds an outbox event of the run on topic with tag.
func newEvent(t *testing.T, topic catalog.Topic, eventType, tag, run string, seq int) outbox.Event {
	t.Helper()
	env, err := envelope.New(envelope.NewParams{
		EventType: eventType, Producer: "e2e", AggregateType: "generation_task",
		AggregateID: uuid.NewString(), TenantID: uuid.NewString(),
		Payload: payload{Run: run, Seq: seq},
	})
	require.NoError(t, err)
	return outbox.Event{Envelope: env, Topic: topic, Tag: tag}
}

// writeEvents commits events to the outbox in transactions of per.
func writeEvents(ctx context.Context, pool *pgxpool.Pool, events []outbox.Event, per int) error {
	for i := 0; i < len(events); i += per {
		chunk := events[i:min(i+per, len(events))]
		if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return outbox.Write(ctx, tx, chunk...) }); err != nil {
			return fmt.Errorf("write events %d..%d: %w", i, i+len(chunk), err)
		}
	}
	return nil
}

// effectCounts returns how many effect rows exist and how many distinct
// events they belong to.
func effectCounts(t *testing.T, pool *pgxpool.Pool) (rows, distinct int) {
	t.Helper()
	require.NoError(t, pool.QueryRow(context.Background(),
		`SELECT count(*), count(DISTINCT event_id) FROM effects`).Scan(&rows, &distinct))
	return rows, distinct
}

// waitForEffects waits until n distinct events have their effect.
func waitForEffects(t *testing.T, pool *pgxpool.Pool, n int, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		_, distinct := effectCounts(t, pool)
		if distinct >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("only %d of %d events had their effect within %s", distinct, n, within)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// testLogger writes warnings and errors to the test's output.
func testLogger(t *testing.T, component string) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn})).With(slog.String("component", component))
}
