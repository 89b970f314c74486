package inbox_test

import (
	"context"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/shared/inbox"
)

func TestLookupReadsWhatTheConsumerCommitted(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ev := newEvent(t)
	id := uuid.MustParse(ev.EventID)
	rec, err := inbox.Lookup(t.Context(), b.pool, consumer, id)
	require.NoError(t, err)
	require.Nil(t, rec, "nothing committed yet")

	_, err = inbox.Do(t.Context(), b.pool, consumer, ev, func(context.Context, pgx.Tx) (inbox.Result, error) { return inbox.StaleNoop, nil })
	require.NoError(t, err)
	rec, err = inbox.Lookup(t.Context(), b.pool, consumer, id)
	require.NoError(t, err)
	require.NotNil(t, rec)
	require.Equal(t, inbox.StaleNoop, rec.Result)
	require.Equal(t, ev.EventID, rec.EventID)
	require.False(t, rec.ProcessedAt.IsZero())

	other, err := inbox.Lookup(t.Context(), b.pool, "cg.other.v1", id)
	require.NoError(t, err)
	require.Nil(t, other, "another consumer's inbox is its own")
}
