package submit_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/shared/provider"
	"github.com/aivedio/pipeline/shared/task"
)

// committedAtCall is what another connection than the submit's read at
// the moment the provider was called: only what was committed by then.
type committedAtCall struct {
	attemptStatus string
	sends         int
	taskStatus    task.Status
}

// TestTheAttemptIsCommittedBeforeTheProviderIsCalled: when a submit
// reaches the provider, its attempt (with the key sent) and the send
// are committed, and the task is SUBMITTING: a process that dies in the
// call leaves the record that a send may have gone out, so that nothing
// resends blind. The provider reads them from its own connection, for the
// first send and for the retry after a 429.
func TestTheAttemptIsCommittedBeforeTheProviderIsCalled(t *testing.T) {
	t.Parallel()
	var b *testBundle
	var seen []committedAtCall
	b = setup(t, func(n int) (provider.Job, error) {
		key := b.fake.keys[n-1]
		var c committedAtCall
		require.NoError(t, b.pool.QueryRow(context.Background(), `SELECT a.status, a.sends, t.status
			FROM task_attempts a JOIN generation_tasks t USING (task_id) WHERE a.provider_idempotency_key = $1`, key).
			Scan(&c.attemptStatus, &c.sends, &c.taskStatus), "the attempt of key %s is not committed when the provider is called", key)
		seen = append(seen, c)
		if n == 1 {
			return provider.Job{}, &provider.Error{Class: provider.ClassRateLimited, StatusCode: http.StatusTooManyRequests, RetryAfter: time.Second}
		}
		return accepted(n)
	})
	require.NoError(t, b.deliver(t, uuid.NewString()))
	require.Equal(t, task.WaitingRetry, b.reload(t).Status)
	_, err := b.pool.Exec(t.Context(), `UPDATE generation_tasks SET next_retry_at = now()`)
	require.NoError(t, err)
	require.NoError(t, b.deliver(t, uuid.NewString()))
	require.Equal(t, task.ProviderRunning, b.reload(t).Status)

	require.Equal(t, []committedAtCall{
		{attemptStatus: "SUBMITTING", sends: 1, taskStatus: task.Submitting},
		{attemptStatus: "SUBMITTING", sends: 2, taskStatus: task.Submitting},
	}, seen, "at each call: the attempt, the send counted, the task SUBMITTING")
}
