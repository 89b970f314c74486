package inbox_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/shared/envelope"
	"github.com/aivedio/pipeline/shared/inbox"
	"github.com/aivedio/pipeline/shared/outcome"
)

func newEvents(t *testing.T, n int) []envelope.Envelope {
	t.Helper()
	evs := make([]envelope.Envelope, n)
	for i := range evs {
		evs[i] = newEvent(t)
	}
	return evs
}

func TestDoBatchOneFailing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	evs := newEvents(t, 10)
	const bad = 3
	errFn := errors.New("provider rejected the request")
	h := &handler{}
	fn := func(ctx context.Context, tx pgx.Tx, ev envelope.Envelope) (inbox.Result, error) {
		res, err := h.apply(ctx, tx, ev) // the failing event does its work too, then fails
		if err == nil && ev.EventID == evs[bad].EventID {
			return "", errFn
		}
		return res, err
	}

	outs, errs, err := inbox.DoBatch(t.Context(), b.pool, consumer, evs, fn)
	require.NoError(t, err)
	require.Len(t, outs, len(evs))
	require.Len(t, errs, len(evs))
	for i, ev := range evs {
		if i == bad {
			require.Same(t, errFn, errs[i], "the function's error comes back unchanged")
			require.Zero(t, outs[i])
			require.Zero(t, b.counter(t, ev.EventID), "the failing event's work must roll back")
			require.Zero(t, b.outboxCount(t, ev.EventID))
			_, _, ok := b.recorded(t, consumer, ev.EventID)
			require.False(t, ok, "the failing event must not be recorded")
			continue
		}
		require.NoError(t, errs[i])
		require.Equal(t, inbox.Outcome{Result: inbox.Applied}, outs[i])
		require.Equal(t, 1, b.counter(t, ev.EventID))
		require.Equal(t, 1, b.outboxCount(t, ev.EventID))
		result, hash, ok := b.recorded(t, consumer, ev.EventID)
		require.True(t, ok)
		require.Equal(t, "APPLIED", result)
		require.Equal(t, payloadHash(ev), hash)
	}
	require.EqualValues(t, 10, h.calls.Load())

	// The broker redelivers all ten: nine duplicates, and the failed one applies.
	h = &handler{}
	outs, errs, err = inbox.DoBatch(t.Context(), b.pool, consumer, evs, func(ctx context.Context, tx pgx.Tx, ev envelope.Envelope) (inbox.Result, error) {
		return h.apply(ctx, tx, ev)
	})
	require.NoError(t, err)
	for i, ev := range evs {
		require.NoError(t, errs[i])
		require.Equal(t, inbox.Outcome{Duplicate: i != bad, Result: inbox.Applied}, outs[i])
		require.Equal(t, 1, b.counter(t, ev.EventID))
	}
	require.EqualValues(t, 1, h.calls.Load())
}

func TestDoBatchMixed(t *testing.T) {
	t.Parallel()
	b := setup(t)
	done, stale, fresh := newEvent(t), newEvent(t), newEvent(t)
	h := &handler{}
	_, err := inbox.Do(t.Context(), b.pool, consumer, done, h.fn(done))
	require.NoError(t, err)

	reused := done
	reused.Payload = json.RawMessage(`{"task_id":"other"}`)
	invalid := newEvent(t)
	invalid.TenantID = ""
	evs := []envelope.Envelope{done, reused, invalid, stale, fresh, fresh}

	var calls atomic.Int32
	fn := func(ctx context.Context, tx pgx.Tx, ev envelope.Envelope) (inbox.Result, error) {
		calls.Add(1)
		if err := increment(ctx, tx, ev.EventID); err != nil {
			return "", err
		}
		if ev.EventID == stale.EventID {
			return inbox.StaleNoop, nil
		}
		return inbox.Applied, nil
	}
	outs, errs, err := inbox.DoBatch(t.Context(), b.pool, consumer, evs, fn)
	require.NoError(t, err)

	require.Equal(t, []inbox.Outcome{
		{Duplicate: true, Result: inbox.Applied}, // processed before
		{},                                       // payload mismatch
		{},                                       // invalid envelope
		{Result: inbox.StaleNoop},
		{Result: inbox.Applied},
		{Duplicate: true, Result: inbox.Applied}, // twice in one batch
	}, outs)
	require.NoError(t, errs[0])
	class, code := outcome.Of(errs[1])
	require.Equal(t, outcome.ClassPermanent, class)
	require.Equal(t, "inbox.payload_mismatch", code)
	require.ErrorIs(t, errs[2], envelope.ErrInvalid)
	require.True(t, outcome.IsPermanent(errs[2]))
	require.NoError(t, errs[3])
	require.NoError(t, errs[4])
	require.NoError(t, errs[5])
	require.EqualValues(t, 2, calls.Load())
	require.Equal(t, 1, b.counter(t, fresh.EventID))
	result, _, ok := b.recorded(t, consumer, stale.EventID)
	require.True(t, ok)
	require.Equal(t, "STALE_NOOP", result)
}

// A conflict aborts the whole transaction, so the whole batch runs again.
func TestDoBatchRetriesConflicts(t *testing.T) {
	t.Parallel()
	b := setup(t)
	evs := newEvents(t, 3)
	var calls, raised atomic.Int32
	fn := func(ctx context.Context, tx pgx.Tx, ev envelope.Envelope) (inbox.Result, error) {
		calls.Add(1)
		if err := increment(ctx, tx, ev.EventID); err != nil {
			return "", err
		}
		if ev.EventID == evs[1].EventID && raised.Add(1) == 1 {
			_, err := tx.Exec(ctx, raiseSQL)
			return "", err
		}
		return inbox.Applied, nil
	}
	outs, errs, err := inbox.DoBatch(t.Context(), b.pool, consumer, evs, fn)
	require.NoError(t, err)
	for i, ev := range evs {
		require.NoError(t, errs[i])
		require.Equal(t, inbox.Outcome{Result: inbox.Applied}, outs[i])
		require.Equal(t, 1, b.counter(t, ev.EventID))
	}
	require.EqualValues(t, 2+3, calls.Load())
}

func TestDoBatchArguments(t *testing.T) {
	t.Parallel()
	b := setup(t)
	never := func(context.Context, pgx.Tx, envelope.Envelope) (inbox.Result, error) {
		panic("must not run")
	}

	outs, errs, err := inbox.DoBatch(t.Context(), b.pool, consumer, nil, never)
	require.NoError(t, err)
	require.Empty(t, outs)
	require.Empty(t, errs)

	_, _, err = inbox.DoBatch(t.Context(), b.pool, "", newEvents(t, 1), never)
	require.ErrorContains(t, err, "consumer name is required")

	_, _, err = inbox.DoBatch(t.Context(), b.pool, consumer, newEvents(t, inbox.MaxBatch+1), never)
	require.ErrorContains(t, err, "a batch takes at most 64 events, got 65")
}
