package inbox_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/shared/envelope"
	"github.com/aivedio/pipeline/shared/inbox"
	"github.com/aivedio/pipeline/shared/outcome"
)

func TestDoAppliesOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ev := newEvent(t)
	h := &handler{}

	out, err := inbox.Do(t.Context(), b.pool, consumer, ev, h.fn(ev))
	require.NoError(t, err)
	require.Equal(t, inbox.Outcome{Result: inbox.Applied}, out)
	require.EqualValues(t, 1, h.calls.Load())
	require.Equal(t, 1, b.counter(t, ev.EventID))
	require.Equal(t, 1, b.outboxCount(t, ev.EventID), "the downstream event commits with the effect")
	result, hash, ok := b.recorded(t, consumer, ev.EventID)
	require.True(t, ok)
	require.Equal(t, "APPLIED", result)
	require.Equal(t, payloadHash(ev), hash)

	out, err = inbox.Do(t.Context(), b.pool, consumer, ev, h.fn(ev))
	require.NoError(t, err)
	require.Equal(t, inbox.Outcome{Duplicate: true, Result: inbox.Applied}, out)
	require.EqualValues(t, 1, h.calls.Load(), "a duplicate must not run the function")
	require.Equal(t, 1, b.counter(t, ev.EventID))
	require.Equal(t, 1, b.outboxCount(t, ev.EventID))
}

func TestDoStaleNoop(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ev := newEvent(t)
	stale := func(context.Context, pgx.Tx) (inbox.Result, error) { return inbox.StaleNoop, nil }

	out, err := inbox.Do(t.Context(), b.pool, consumer, ev, stale)
	require.NoError(t, err)
	require.Equal(t, inbox.Outcome{Result: inbox.StaleNoop}, out)
	result, _, ok := b.recorded(t, consumer, ev.EventID)
	require.True(t, ok)
	require.Equal(t, "STALE_NOOP", result)

	h := &handler{}
	out, err = inbox.Do(t.Context(), b.pool, consumer, ev, h.fn(ev))
	require.NoError(t, err)
	require.Equal(t, inbox.Outcome{Duplicate: true, Result: inbox.StaleNoop}, out, "a stale no-op is final too")
	require.Zero(t, h.calls.Load())
}

func TestDoFuncErrorRecordsNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ev := newEvent(t)
	errFn := outcome.Permanentf("tenant.mismatch", "task belongs to another tenant")
	failing := &handler{err: errFn}

	out, err := inbox.Do(t.Context(), b.pool, consumer, ev, failing.fn(ev))
	require.Same(t, errFn, err, "the function's error comes back unchanged")
	require.True(t, outcome.IsPermanent(err))
	require.Zero(t, out)
	require.EqualValues(t, 1, failing.calls.Load(), "a permanent error is not retried")
	_, _, ok := b.recorded(t, consumer, ev.EventID)
	require.False(t, ok, "a failed delivery must not be recorded")
	require.Zero(t, b.counter(t, ev.EventID), "the function's work must roll back")
	require.Zero(t, b.outboxCount(t, ev.EventID), "the function's events must roll back")

	// The broker redelivers; this time it works.
	h := &handler{}
	out, err = inbox.Do(t.Context(), b.pool, consumer, ev, h.fn(ev))
	require.NoError(t, err)
	require.Equal(t, inbox.Outcome{Result: inbox.Applied}, out)
	require.Equal(t, 1, b.counter(t, ev.EventID))
	require.Equal(t, 1, b.outboxCount(t, ev.EventID))
}

func TestDoUnknownResult(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, result := range []inbox.Result{"", "DONE", "applied"} {
		ev := newEvent(t)
		fn := func(ctx context.Context, tx pgx.Tx) (inbox.Result, error) {
			return result, increment(ctx, tx, ev.EventID)
		}
		_, err := inbox.Do(t.Context(), b.pool, consumer, ev, fn)
		require.ErrorContains(t, err, `returned result "`+string(result)+`"; want "APPLIED" or "STALE_NOOP"`)
		_, _, ok := b.recorded(t, consumer, ev.EventID)
		require.False(t, ok)
		require.Zero(t, b.counter(t, ev.EventID))
	}
}

func TestDoPayloadMismatch(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ev := newEvent(t)
	_, err := inbox.Do(t.Context(), b.pool, consumer, ev, (&handler{}).fn(ev))
	require.NoError(t, err)

	reused := ev
	reused.Payload = json.RawMessage(`{"task_id":"another","version":9}`)
	h := &handler{}
	out, err := inbox.Do(t.Context(), b.pool, consumer, reused, h.fn(reused))
	require.Error(t, err)
	class, code := outcome.Of(err)
	require.Equal(t, outcome.ClassPermanent, class)
	require.Equal(t, "inbox.payload_mismatch", code)
	require.ErrorContains(t, err, "event "+ev.EventID+" was already processed by "+consumer+" with another payload")
	require.Zero(t, out)
	require.Zero(t, h.calls.Load())
	require.Equal(t, 1, b.counter(t, ev.EventID))
}

func TestDoConsumersAreIndependent(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ev := newEvent(t)
	h := &handler{}
	for _, c := range []string{"cg.scheduler.submit.v1", "cg.notification.push.v1"} {
		out, err := inbox.Do(t.Context(), b.pool, c, ev, h.fn(ev))
		require.NoError(t, err)
		require.Equal(t, inbox.Outcome{Result: inbox.Applied}, out, "consumer %s", c)
	}
	require.Equal(t, 2, b.counter(t, ev.EventID))
}

func TestDoRejectsBadArguments(t *testing.T) {
	t.Parallel()
	b := setup(t)
	h := &handler{}

	ev := newEvent(t)
	_, err := inbox.Do(t.Context(), b.pool, "", ev, h.fn(ev))
	require.ErrorContains(t, err, "consumer name is required")

	bad := newEvent(t)
	bad.EventID = "42"
	_, err = inbox.Do(t.Context(), b.pool, consumer, bad, h.fn(bad))
	require.ErrorIs(t, err, envelope.ErrInvalid)
	class, code := outcome.Of(err)
	require.Equal(t, outcome.ClassPermanent, class)
	require.Equal(t, "envelope.bad_id", code)
	require.Zero(t, h.calls.Load())
}

func TestDoContextCanceled(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ev := newEvent(t)
	ctx, cancel := context.WithCancel(t.Context())
	fn := func(ctx context.Context, tx pgx.Tx) (inbox.Result, error) {
		cancel()
		if err := increment(ctx, tx, ev.EventID); err != nil {
			return "", err
		}
		return inbox.Applied, nil
	}
	_, err := inbox.Do(ctx, b.pool, consumer, ev, fn)
	require.True(t, errors.Is(err, context.Canceled), "got %v", err)
	_, _, ok := b.recorded(t, consumer, ev.EventID)
	require.False(t, ok)
	require.Zero(t, b.counter(t, ev.EventID))
}

// Given a transaction instead of a pool, Do works in a savepoint of it:
// its work commits or rolls back with the caller's transaction.
func TestDoInsideTransaction(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ev := newEvent(t)
	h := &handler{}
	tx, err := b.pool.Begin(t.Context())
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(t.Context()) }()

	out, err := inbox.Do(t.Context(), tx, consumer, ev, h.fn(ev))
	require.NoError(t, err)
	require.Equal(t, inbox.Outcome{Result: inbox.Applied}, out)
	out, err = inbox.Do(t.Context(), tx, consumer, ev, h.fn(ev))
	require.NoError(t, err)
	require.Equal(t, inbox.Outcome{Duplicate: true, Result: inbox.Applied}, out)
	_, _, ok := b.recorded(t, consumer, ev.EventID)
	require.False(t, ok, "nothing is visible before the caller commits")

	require.NoError(t, tx.Commit(t.Context()))
	_, _, ok = b.recorded(t, consumer, ev.EventID)
	require.True(t, ok)
	require.Equal(t, 1, b.counter(t, ev.EventID))
}
