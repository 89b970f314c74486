package render_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/functions/render"
	"github.com/aivedio/pipeline/functions/stage/stagetest"
	"github.com/aivedio/pipeline/shared/catalog"
	renders "github.com/aivedio/pipeline/shared/render"
	"github.com/aivedio/pipeline/shared/task"
)

// failedCommitHook runs between once, in the goroutine whose commit
// failed with a serialization failure, before the inbox runs that
// transaction again.
type failedCommitHook struct {
	once    sync.Once
	between func()
	ran     bool
}

func (h *failedCommitHook) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	return ctx
}

func (h *failedCommitHook) TraceQueryEnd(_ context.Context, _ *pgx.Conn, data pgx.TraceQueryEndData) {
	var pgErr *pgconn.PgError
	if errors.As(data.Err, &pgErr) && pgErr.Code == pgerrcode.SerializationFailure {
		h.once.Do(func() { h.between(); h.ran = true })
	}
}

// TestAStoreRunAgainCleansUpAsItsLastAttempt: the inbox runs a chunk's
// store again when its commit fails with a serialization failure; when,
// in between, a redelivery of the event recorded it (the render was
// canceled), the store's second attempt finds the event processed, and
// the delivery cleans up as one whose store was not recorded: its claim
// goes back and its object away. What its first attempt would have left
// to do (nothing: the chunk was stored, in a transaction that did not
// commit) does not carry over.
func TestAStoreRunAgainCleansUpAsItsLastAttempt(t *testing.T) {
	t.Parallel()
	f := newFixture(t, render.Params{ChunkLength: 10 * time.Second})
	j := f.request(t, "720p30-h264")
	for _, ev := range f.pending(t) {
		require.NoError(t, f.deliver(t.Context(), t, ev)) // start
	}
	chunkEvents := f.pending(t)
	require.Len(t, chunkEvents, 1)

	// The first commit that stores a chunk fails as a serialization
	// failure would; a sequence, which no rollback resets, counts them.
	_, err := f.pool.Exec(t.Context(), `
		CREATE SEQUENCE chunk_store_commits;
		CREATE FUNCTION fail_first_chunk_store() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			IF nextval('chunk_store_commits') = 1 THEN
				RAISE EXCEPTION 'the first commit of a chunk store fails' USING ERRCODE = 'serialization_failure';
			END IF;
			RETURN NULL;
		END $$;
		CREATE CONSTRAINT TRIGGER fail_first_chunk_store AFTER UPDATE ON render_chunks DEFERRABLE INITIALLY DEFERRED
			FOR EACH ROW WHEN (NEW.status = 'DONE') EXECUTE FUNCTION fail_first_chunk_store()`)
	require.NoError(t, err)

	hook := &failedCommitHook{between: func() {
		require.NoError(t, pgx.BeginFunc(t.Context(), f.pool, func(tx pgx.Tx) error {
			cur, err := renders.Lock(t.Context(), tx, j.ID)
			if err != nil {
				return err
			}
			_, err = renders.Apply(t.Context(), tx, task.Origin{Producer: "test"}, cur, renders.Change{To: renders.Canceled})
			return err
		}))
		require.NoError(t, f.deliver(t.Context(), t, chunkEvents[0]), "the redelivery of a canceled render's chunk")
		require.EqualValues(t, "STALE_NOOP", stagetest.InboxResult(t, f.pool, catalog.GroupRender.Name, chunkEvents[0].Envelope.EventID))
	}}
	cfg, err := pgxpool.ParseConfig(f.url)
	require.NoError(t, err)
	cfg.ConnConfig.Tracer = hook
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	fn := render.New(render.Params{Pool: pool, Blob: f.store, Media: f.tool, TmpDir: t.TempDir(), ChunkLength: 10 * time.Second,
		Watch: 100 * time.Millisecond})

	ce, err := chunkEvents[0].Envelope.ToCloudEvent()
	require.NoError(t, err)
	_, err = fn.Handle(t.Context(), ce)
	require.NoError(t, err)
	require.True(t, hook.ran, "the store's commit failed and ran again")

	c, err := renders.GetChunk(t.Context(), f.pool, j.TenantID, j.Key, 0)
	require.NoError(t, err)
	require.Equal(t, renders.ChunkPending, c.Status, "the claim of a store that was not recorded goes back")
	require.Empty(t, f.objects(t, j), "and its object away")
}
