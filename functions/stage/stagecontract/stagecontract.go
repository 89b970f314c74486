// Package stagecontract is the contract every stage function keeps, as one
// suite that each stage package runs from a test named TestStageContract,
// as adapter/mq/mqtest is for brokers. Every case runs twice: in process
// (delivery.Func, as a test or an embedded adapter delivers) and over
// HTTP (stage.HTTPHandler behind delivery.HTTP, as every deployment
// and `go run ./local` deliver), and the adapter's reading of the answer
// (ACK, quarantine with a code, retry) must be the same on both.
//
// The cases:
//
//   - a duplicate delivery gives one effect, and does none of the costly
//     work again (World.Work: the provider call, the ffmpeg run);
//   - a stale event (the task moved on) records STALE_NOOP and does nothing;
//   - an event naming another tenant than its task's, or an asset of
//     another tenant, is permanent with security.tenant_mismatch;
//   - an event type the stage does not handle is permanent;
//   - a payload with a field a newer producer added is applied;
//   - a payload without a required field is permanent (payload.invalid);
//   - a retryable failure of a dependency answers retryable (5xx) and
//     commits nothing.
package stagecontract

import (
	"context"
	"errors"
	"maps"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/functions/stage"
	"github.com/aivedio/pipeline/shared/dbtest"
	"github.com/aivedio/pipeline/shared/delivery"
	"github.com/aivedio/pipeline/shared/envelope"
	"github.com/aivedio/pipeline/shared/outcome"
	"github.com/aivedio/pipeline/shared/task"
)

// Stage is what a stage package hands the suite.
type Stage struct {
	// EventType is the event the cases deliver.
	EventType string
	// Consumer is the inbox consumer name the stage records EventType
	// under; "" for a stage that keeps no inbox (notify, whose effect is
	// itself idempotent: see World.Effects).
	Consumer string
	// ReadsAsset says the event names an asset: the foreign-asset case
	// runs, with World.ForeignAsset.
	ReadsAsset bool
	// Setup builds a fresh world for one case: a schema of its own (see
	// [Schema]), a task (and asset) the stage acts on, and the function.
	Setup func(t *testing.T) World
}

// World is one case's stage, task and probes.
type World struct {
	Func *stage.Function
	// Check reads what the stage committed; it must stay usable after
	// Break (a pool of its own, see [Schema]). Nil for a stage that keeps
	// nothing in PostgreSQL.
	Check *pgxpool.Pool
	Task  task.Task
	// Payload is an event payload the stage acts on, and Required one of
	// its required fields.
	Payload  map[string]any
	Required string
	// Effects counts the stage's business effects so far (the events it
	// wrote, a ledger row, a message published): one delivery that acts
	// adds at least one, a duplicate none.
	Effects func(t *testing.T) int
	// Work counts the costly work the stage did so far outside its
	// transaction: provider calls, ffmpeg and ffprobe runs, reviewer
	// calls. It is what a duplicate or a stale event must not do again,
	// and what a UNIQUE constraint on Effects cannot catch (the second
	// run rolls back, its cost is paid). Nil only for a stage whose whole
	// work is its transaction (settle, a render's start, notify's push).
	Work func(t *testing.T) int
	// MakeStale moves the task (or its chain) on, so that Payload no
	// longer applies.
	MakeStale func(t *testing.T)
	// Break makes a dependency of the stage fail, retryably, from now on:
	// its database pool closed, its Redis gone, its provider unreachable.
	Break func(t *testing.T)
	// ForeignAsset, for a stage that reads an asset (Stage.ReadsAsset), is
	// a payload naming an asset of the task that another tenant owns.
	ForeignAsset func(t *testing.T) map[string]any
}

// Schema gives a case a fresh migrated schema and two pools on it: check
// for the suite and fixtures, stagePool for the function (which Break may
// close).
func Schema(t *testing.T) (check, stagePool *pgxpool.Pool) {
	t.Helper()
	url := dbtest.TestSchemaURL(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	check, err := pgxpool.New(ctx, url)
	require.NoError(t, err)
	t.Cleanup(check.Close)
	stagePool, err = pgxpool.New(ctx, url)
	require.NoError(t, err)
	t.Cleanup(stagePool.Close)
	return check, stagePool
}

// path is one way the adapter hands an event to the function.
type path struct {
	name    string
	deliver func(t *testing.T, fn *stage.Function, ev event.Event) error
}

var paths = []path{
	{"in process", func(t *testing.T, fn *stage.Function, ev event.Event) error {
		return delivery.Func(fn.Handle).Deliver(t.Context(), ev)
	}},
	{"over HTTP", func(t *testing.T, fn *stage.Function, ev event.Event) error {
		srv := httptest.NewServer(stage.HTTPHandler(fn.Handle))
		defer srv.Close()
		return delivery.NewHTTP(srv.URL, 1, time.Second).Deliver(t.Context(), ev)
	}},
}

// Run runs the contract on s, every case on both paths.
func Run(t *testing.T, s Stage) {
	t.Helper()
	for _, p := range paths {
		t.Run(p.name, func(t *testing.T) {
			t.Parallel()
			for name, c := range cases {
				if name == foreignAssetCase && !s.ReadsAsset {
					continue
				}
				t.Run(name, func(t *testing.T) {
					t.Parallel()
					w := s.Setup(t)
					require.NotNil(t, w.Func, "Setup gave no function")
					c(t, &run{stage: s, world: w, path: p})
				})
			}
		})
	}
}

// run is one case on one path.
type run struct {
	stage Stage
	world World
	path  path
}

// deliver sends one event about the world's task and returns the
// adapter's reading of the answer.
func (r *run) deliver(t *testing.T, eventID, eventType, tenantID string, payload map[string]any) error {
	t.Helper()
	env, err := envelope.New(envelope.NewParams{EventID: eventID, EventType: eventType, Producer: "contract",
		AggregateType: task.AggregateType, AggregateID: r.world.Task.ID.String(), TenantID: tenantID, Payload: payload})
	require.NoError(t, err)
	ev, err := env.ToCloudEvent()
	require.NoError(t, err)
	return r.path.deliver(t, r.world.Func, ev)
}

func (r *run) deliverPayload(t *testing.T, eventID string, payload map[string]any) error {
	t.Helper()
	return r.deliver(t, eventID, r.stage.EventType, r.world.Task.TenantID.String(), payload)
}

// work is World.Work, 0 for a stage without work outside its transaction.
func (r *run) work(t *testing.T) int {
	if r.world.Work == nil {
		return 0
	}
	return r.world.Work(t)
}

// inbox is what the inbox recorded for eventID: "" when nothing.
func (r *run) inbox(t *testing.T, eventID string) string {
	t.Helper()
	if r.stage.Consumer == "" {
		return ""
	}
	var result string
	err := r.world.Check.QueryRow(t.Context(), `SELECT result_code FROM inbox_dedup WHERE consumer_name = $1 AND event_id = $2`,
		r.stage.Consumer, eventID).Scan(&result)
	if errors.Is(err, pgx.ErrNoRows) {
		return ""
	}
	require.NoError(t, err)
	return result
}

// requireRefused checks that err is permanent with code and that nothing
// was committed for eventID: no inbox row, no effect beyond before.
func (r *run) requireRefused(t *testing.T, err error, eventID, code string, before int) {
	t.Helper()
	class, got := outcome.Of(err)
	require.Equal(t, outcome.ClassPermanent, class, "%v", err)
	require.Equal(t, code, got, "%v", err)
	require.Empty(t, r.inbox(t, eventID), "a refused event commits nothing")
	require.Equal(t, before, r.world.Effects(t), "a refused event has no effect")
}

func with(payload map[string]any, key string, value any) map[string]any {
	p := maps.Clone(payload)
	p[key] = value
	return p
}

const foreignAssetCase = "another tenant's asset is a security error"

var cases = map[string]func(t *testing.T, r *run){
	"a duplicate delivery has one effect": func(t *testing.T, r *run) {
		id := uuid.NewString()
		require.NoError(t, r.deliverPayload(t, id, r.world.Payload))
		n := r.world.Effects(t)
		require.Positive(t, n, "the first delivery acts")
		if r.world.Work != nil {
			require.Positive(t, r.work(t), "the first delivery does the stage's work")
		}
		if r.stage.Consumer != "" {
			require.Equal(t, "APPLIED", r.inbox(t, id))
		}
		work := r.work(t)
		require.NoError(t, r.deliverPayload(t, id, r.world.Payload), "a duplicate is answered as done")
		require.Equal(t, n, r.world.Effects(t), "and has no effect")
		require.Equal(t, work, r.work(t), "and does none of the stage's work again")
	},
	"a stale event is a recorded no-op": func(t *testing.T, r *run) {
		r.world.MakeStale(t)
		before, work := r.world.Effects(t), r.work(t)
		id := uuid.NewString()
		require.NoError(t, r.deliverPayload(t, id, r.world.Payload))
		require.Equal(t, before, r.world.Effects(t))
		require.Equal(t, work, r.work(t), "a stale event does none of the stage's work")
		if r.stage.Consumer != "" {
			require.Equal(t, "STALE_NOOP", r.inbox(t, id))
		}
	},
	"another tenant's task is a security error": func(t *testing.T, r *run) {
		id := uuid.NewString()
		err := r.deliver(t, id, r.stage.EventType, uuid.NewString(), r.world.Payload)
		r.requireRefused(t, err, id, "security.tenant_mismatch", 0)
	},
	foreignAssetCase: func(t *testing.T, r *run) {
		p := r.world.ForeignAsset(t)
		id := uuid.NewString()
		r.requireRefused(t, r.deliverPayload(t, id, p), id, "security.tenant_mismatch", 0)
	},
	"an event type the stage does not handle is permanent": func(t *testing.T, r *run) {
		id := uuid.NewString()
		err := r.deliver(t, id, "contract.unknown.happened", r.world.Task.TenantID.String(), r.world.Payload)
		r.requireRefused(t, err, id, "event.type_not_handled", 0)
	},
	"a field a newer producer added is applied": func(t *testing.T, r *run) {
		id := uuid.NewString()
		require.NoError(t, r.deliverPayload(t, id, with(r.world.Payload, "added_by_a_newer_producer", map[string]any{"x": 1})))
		require.Positive(t, r.world.Effects(t))
		if r.stage.Consumer != "" {
			require.Equal(t, "APPLIED", r.inbox(t, id))
		}
	},
	"a missing required field is permanent": func(t *testing.T, r *run) {
		require.Contains(t, r.world.Payload, r.world.Required, "Required names a field of Payload")
		p := maps.Clone(r.world.Payload)
		delete(p, r.world.Required)
		id := uuid.NewString()
		r.requireRefused(t, r.deliverPayload(t, id, p), id, "payload.invalid", 0)
	},
	"a dependency failure is retryable and commits nothing": func(t *testing.T, r *run) {
		r.world.Break(t)
		id := uuid.NewString()
		err := r.deliverPayload(t, id, r.world.Payload)
		class, _ := outcome.Of(err)
		require.Error(t, err)
		require.Equal(t, outcome.ClassRetryable, class, "%v", err)
		require.Empty(t, r.inbox(t, id))
		require.Zero(t, r.world.Effects(t))
	},
}
