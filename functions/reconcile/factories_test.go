package reconcile_test

import (
	"context"
	"crypto/sha256"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/shared/envelope"
	"github.com/aivedio/pipeline/shared/outbox"
	"github.com/aivedio/pipeline/shared/provider"
	"github.com/aivedio/pipeline/shared/servicetest"
	"github.com/aivedio/pipeline/shared/task"
	"github.com/aivedio/pipeline/shared/tenant"
)

const providerName = "fake"

// lookup is one FindByClientRequestID call.
type lookup struct {
	ClientRequestID string
	Since           time.Time
}

// fakeProvider answers lookups by client request id with a scripted
// result and Submit with a new job, recording both.
type fakeProvider struct {
	provider.Client
	mu      sync.Mutex
	find    func(n int) (provider.Job, error)
	lookups []lookup
	submits []provider.SubmitRequest
}

func (f *fakeProvider) Name() string { return providerName }

func (f *fakeProvider) FindByClientRequestID(_ context.Context, clientRequestID string, since time.Time) (provider.Job, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lookups = append(f.lookups, lookup{clientRequestID, since})
	return f.find(len(f.lookups))
}

func (f *fakeProvider) Submit(_ context.Context, req provider.SubmitRequest) (provider.Job, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.submits = append(f.submits, req)
	return provider.Job{ID: "job-resubmitted", Status: provider.StatusQueued}, nil
}

// attempt is the task_attempts row the lost submit left.
type attempt struct {
	ID              uuid.UUID
	IdempotencyKey  string
	ClientRequestID string
	StartedAt       time.Time
}

// reconcilingTask creates a tenant and a task whose submit answer was
// lost: SUBMITTING -> RECONCILING with its attempt SUBMIT_UNKNOWN, as the
// submit stage leaves it.
func reconcilingTask(t *testing.T, pool *pgxpool.Pool) (task.Task, attempt) {
	t.Helper()
	ctx := t.Context()
	o := task.Origin{Producer: "test"}
	var cur task.Task
	a := attempt{ID: uuid.Must(uuid.NewV7())}
	a.ClientRequestID = a.ID.String()
	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		c, err := tenant.Create(ctx, tx, tenant.NewTenant{Name: "acme", Credits: 100}, tenant.RoleTenant)
		if err != nil {
			return err
		}
		hash := sha256.Sum256([]byte("request"))
		cur, _, err = task.Create(ctx, tx, o, task.New{TenantID: c.TenantID, IdempotencyKey: "k", RequestHash: hash[:],
			Model: "m", Prompt: "a cat", DurationSeconds: 2, Resolution: "640x360"},
			func(task.Task) ([]outbox.Event, error) { return nil, nil })
		if err != nil {
			return err
		}
		if cur, err = task.Apply(ctx, tx, o, cur, task.Transition{To: task.Submitting, Set: task.Fields{Provider: task.Ptr(providerName)}}); err != nil {
			return err
		}
		a.IdempotencyKey = cur.ID.String() + "-1"
		if err := tx.QueryRow(ctx, `INSERT INTO task_attempts (attempt_id, task_id, attempt_no, provider, model, provider_idempotency_key,
			client_request_id, status, error_code, request_started_at, response_at)
			VALUES ($1, $2, 1, $3, 'm', $4, $5, 'SUBMIT_UNKNOWN', 'timeout_unknown', now() - interval '1 minute', now())
			RETURNING request_started_at`, a.ID, cur.ID, providerName, a.IdempotencyKey, a.ClientRequestID).Scan(&a.StartedAt); err != nil {
			return err
		}
		cur, err = task.Apply(ctx, tx, o, cur, task.Transition{To: task.Reconciling, Reason: "submit answer lost"})
		return err
	}))
	return cur, a
}

// attemptRow is what the reconciler may change of an attempt.
type attemptRow struct {
	ID             uuid.UUID
	Status         string
	IdempotencyKey string
	ProviderJobID  *string
}

// attempts lists a task's attempts in order.
func attempts(t *testing.T, pool *pgxpool.Pool, taskID uuid.UUID) []attemptRow {
	t.Helper()
	rows, err := pool.Query(t.Context(), `SELECT attempt_id, status, provider_idempotency_key, provider_job_id
		FROM task_attempts WHERE task_id = $1 ORDER BY attempt_no`, taskID)
	require.NoError(t, err)
	got, err := pgx.CollectRows(rows, pgx.RowToStructByPos[attemptRow])
	require.NoError(t, err)
	return got
}

// newRedis connects to the test Redis; the client is closed when the test
// ends.
func newRedis(t *testing.T) *redis.Client {
	t.Helper()
	opts, err := redis.ParseURL(servicetest.Env(t, "Redis", "REDIS_URL"))
	require.NoError(t, err)
	rdb := redis.NewClient(opts)
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// deleteKeys removes every Redis key under prefix.
func deleteKeys(rdb *redis.Client, prefix string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	iter := rdb.Scan(ctx, 0, prefix+"*", 100).Iterator()
	for iter.Next(ctx) {
		if err := rdb.Del(ctx, iter.Val()).Err(); err != nil {
			return err
		}
	}
	return iter.Err()
}

// cloudEvent builds the CloudEvent the adapter would deliver for one event
// about tk.
func cloudEvent(t *testing.T, tk task.Task, eventID, eventType string, payload any) event.Event {
	t.Helper()
	env, err := envelope.New(envelope.NewParams{EventID: eventID, EventType: eventType, Producer: "test",
		AggregateType: task.AggregateType, AggregateID: tk.ID.String(), TenantID: tk.TenantID.String(), Payload: payload})
	require.NoError(t, err)
	ce, err := env.ToCloudEvent()
	require.NoError(t, err)
	return ce
}

// statusOf is the HTTP status a Handle error answers with; 200 for nil.
func statusOf(t *testing.T, err error) int {
	t.Helper()
	if err == nil {
		return 200
	}
	var res *cehttp.Result
	require.True(t, errors.As(err, &res), "Handle returned %v, not an HTTP result", err)
	return res.StatusCode
}

// storedEvents are the outbox events of one type, oldest first.
func storedEvents(t *testing.T, pool *pgxpool.Pool, eventType string) []outbox.Stored {
	t.Helper()
	rows, err := pool.Query(t.Context(), `SELECT `+outbox.Columns+` FROM outbox_events WHERE event_type = $1 ORDER BY created_at, event_id`, eventType)
	require.NoError(t, err)
	evs, err := outbox.Scan(rows)
	require.NoError(t, err)
	return evs
}

// inboxResult is what the inbox recorded for an event, "" when nothing.
func inboxResult(t *testing.T, pool *pgxpool.Pool, consumer, eventID string) string {
	t.Helper()
	var result string
	err := pool.QueryRow(t.Context(), `SELECT result_code FROM inbox_dedup WHERE consumer_name = $1 AND event_id = $2`, consumer, eventID).Scan(&result)
	if errors.Is(err, pgx.ErrNoRows) {
		return ""
	}
	require.NoError(t, err)
	return result
}

// requireAfterDelay checks that at lies d after a moment in [before,
// after]: the stage's own "now" is somewhere in there.
func requireAfterDelay(t *testing.T, at time.Time, d time.Duration, before, after time.Time) {
	t.Helper()
	lo, hi := before.Add(d).Add(-time.Millisecond), after.Add(d).Add(time.Millisecond)
	require.True(t, !at.Before(lo) && !at.After(hi), "%s is not %s after a moment in [%s, %s]", at, d, before, after)
}
