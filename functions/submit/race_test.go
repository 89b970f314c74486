package submit_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/functions/stage/stagetest"
	"github.com/aivedio/pipeline/functions/submit"
	"github.com/aivedio/pipeline/shared/dbtest"
	"github.com/aivedio/pipeline/shared/provider"
	"github.com/aivedio/pipeline/shared/task"
)

// gatedProvider is a provider that does not dedup a resend (Replicate): its
// first create waits for release and is throttled, every later one starts
// a job of its own.
type gatedProvider struct {
	provider.Client
	inCall  chan struct{} // closed when the first create is in the call
	release chan struct{} // the first create answers once it is closed
	calls   atomic.Int32
	jobs    atomic.Int32
}

func (g *gatedProvider) Name() string                 { return "fake" }
func (g *gatedProvider) DedupsByIdempotencyKey() bool { return false }

func (g *gatedProvider) Submit(ctx context.Context, _ provider.SubmitRequest) (provider.Job, error) {
	if g.calls.Add(1) == 1 {
		close(g.inCall)
		select {
		case <-g.release:
		case <-ctx.Done():
			return provider.Job{}, ctx.Err()
		}
		return provider.Job{}, &provider.Error{Class: provider.ClassRateLimited, StatusCode: http.StatusTooManyRequests}
	}
	return provider.Job{ID: fmt.Sprintf("job-%d", g.jobs.Add(1)), Status: provider.StatusQueued}, nil
}

// holdKey marks the context of the delivery whose attempt read is held.
type holdKey struct{}

// attemptReadGate holds the first read of a task's open attempt made under
// a context marked with holdKey, until release is closed.
type attemptReadGate struct {
	once    sync.Once
	held    chan struct{}
	release chan struct{}
}

func (g *attemptReadGate) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	if ctx.Value(holdKey{}) != nil && strings.Contains(data.SQL, "FROM task_attempts WHERE task_id = $1 AND status = $2") {
		g.once.Do(func() {
			close(g.held)
			<-g.release
		})
	}
	return ctx
}

func (g *attemptReadGate) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// TestASendRefusedWhileAnotherDeliveryReadsStartsOneJob forces the race of
// two deliveries of one task at a provider without idempotency keys: the
// second reads the task SUBMITTING while the first's send is in the call,
// and the attempt only after the first recorded its 429 (the task waiting,
// the send counted refused). The second must not send under a task that is
// no longer SUBMITTING (its answer would be dropped as stale and the
// delayed resubmit would start a second paid job): one job in all, and the
// task running on it.
func TestASendRefusedWhileAnotherDeliveryReadsStartsOneJob(t *testing.T) {
	t.Parallel()
	gate := &attemptReadGate{held: make(chan struct{}), release: make(chan struct{})}
	cfg, err := pgxpool.ParseConfig(dbtest.TestSchemaURL(t))
	require.NoError(t, err)
	cfg.ConnConfig.Tracer = gate
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)

	prov := &gatedProvider{inCall: make(chan struct{}), release: make(chan struct{})}
	b := &testBundle{pool: pool, task: stagetest.NewTask(t, pool, nil)}
	b.fn = submit.New(submit.Params{Pool: pool, Providers: provider.Single(prov), Journey: journey, Timeout: 10 * time.Second})

	first := make(chan error, 1)
	go func() { first <- b.deliver(t, uuid.NewString()) }()
	<-prov.inCall

	second := make(chan error, 1)
	go func() {
		ctx := context.WithValue(t.Context(), holdKey{}, true)
		second <- b.deliverCtx(ctx, t, uuid.NewString())
	}()
	<-gate.held // the second read the task SUBMITTING and waits to read the attempt
	close(prov.release)
	require.NoError(t, <-first, "a 429 is a business wait")
	require.Equal(t, task.WaitingRetry, b.reload(t).Status)
	close(gate.release)
	require.NoError(t, <-second)

	// The delayed resubmit of the 429, once due.
	_, err = pool.Exec(t.Context(), `UPDATE generation_tasks SET next_retry_at = now() WHERE status = 'WAITING_RETRY'`)
	require.NoError(t, err)
	require.NoError(t, b.deliverScheduled(t))

	got := b.reload(t)
	require.Equal(t, int32(1), prov.jobs.Load(), "remote jobs started for one task (%d creates)", prov.calls.Load())
	require.Equal(t, task.ProviderRunning, got.Status, "the task runs on the one job")
	require.Equal(t, "job-1", got.ProviderJobID)
}

// TestAWaitingTaskWithAnUnansweredSendLooksItUp: a task waiting to retry
// whose attempt counts a send nothing answered, at a provider that does not
// dedup a resend, goes to the lookup instead of sending again.
func TestAWaitingTaskWithAnUnansweredSendLooksItUp(t *testing.T) {
	t.Parallel()
	b := setup(t, func(n int) (provider.Job, error) {
		if n == 1 {
			return provider.Job{}, &provider.Error{Class: provider.ClassRateLimited, StatusCode: http.StatusTooManyRequests}
		}
		return accepted(n)
	})
	b.fake.noDedup = true
	require.NoError(t, b.deliver(t, uuid.NewString()))
	require.Equal(t, task.WaitingRetry, b.reload(t).Status)
	// A second send went out under the attempt and its answer was never
	// recorded.
	_, err := b.pool.Exec(t.Context(), `UPDATE task_attempts SET sends = sends + 1`)
	require.NoError(t, err)
	_, err = b.pool.Exec(t.Context(), `UPDATE generation_tasks SET next_retry_at = now()`)
	require.NoError(t, err)

	require.NoError(t, b.deliverScheduled(t))
	require.Equal(t, 1, b.fake.submits(), "no resend under an attempt that may have a job")
	require.Equal(t, task.Reconciling, b.reload(t).Status)
	var status string
	require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT status FROM task_attempts`).Scan(&status))
	require.Equal(t, "SUBMIT_UNKNOWN", status)
}
