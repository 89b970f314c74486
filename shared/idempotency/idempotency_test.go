package idempotency_test

import (
	"errors"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/shared/dbtest"
	"github.com/aivedio/pipeline/shared/idempotency"
)

type thing struct {
	ID   int64
	Hash []byte
	Name string
}

var (
	errNotFound = errors.New("thing not found")
	errConflict = errors.New("key used for another thing")
)

var things = idempotency.Table[thing]{
	Name:     "thing",
	Existing: `SELECT id, request_hash, name FROM things WHERE tenant_id = $1 AND client_idempotency_key = $2`,
	Scan: func(row pgx.Row) (thing, error) {
		var th thing
		err := row.Scan(&th.ID, &th.Hash, &th.Name)
		if errors.Is(err, pgx.ErrNoRows) {
			return thing{}, errNotFound
		}
		return th, err
	},
	NotFound:    errNotFound,
	RequestHash: func(th thing) []byte { return th.Hash },
	Conflict:    errConflict,
}

const insertThing = `INSERT INTO things (tenant_id, client_idempotency_key, request_hash, name) VALUES ($1, $2, $3, $4)
	ON CONFLICT (tenant_id, client_idempotency_key) DO NOTHING RETURNING id, request_hash, name`

func setup(t *testing.T) pgx.Tx {
	t.Helper()
	tx := dbtest.TestTx(t)
	_, err := tx.Exec(t.Context(), `CREATE TEMP TABLE things (id bigserial PRIMARY KEY, tenant_id uuid NOT NULL,
		client_idempotency_key text NOT NULL, request_hash bytea NOT NULL, name text NOT NULL CHECK (name <> ''),
		UNIQUE (tenant_id, client_idempotency_key)) ON COMMIT DROP`)
	require.NoError(t, err)
	return tx
}

func create(t *testing.T, tx pgx.Tx, k idempotency.Key, name string) (thing, bool, error) {
	t.Helper()
	return idempotency.Create(t.Context(), tx, things, k, insertThing, k.TenantID, k.Key, k.RequestHash, name)
}

func TestCreateOncePerKey(t *testing.T) {
	t.Parallel()
	tx := setup(t)
	k := idempotency.Key{TenantID: uuid.New(), Key: "k-1", RequestHash: []byte{1}}

	first, created, err := create(t, tx, k, "first")
	require.NoError(t, err)
	require.True(t, created)
	require.Equal(t, "first", first.Name)

	again, created, err := create(t, tx, k, "retry")
	require.NoError(t, err)
	require.False(t, created, "a retry under the key creates nothing")
	require.Equal(t, first, again, "a retry gets the row the first request made")

	other := k
	other.RequestHash = []byte{2}
	reused, created, err := create(t, tx, other, "another")
	require.ErrorIs(t, err, errConflict)
	require.False(t, created)
	require.Equal(t, first, reused, "a reused key answers with the row it names")

	elsewhere := k
	elsewhere.TenantID = uuid.New()
	theirs, created, err := create(t, tx, elsewhere, "theirs")
	require.NoError(t, err)
	require.True(t, created, "a key is the tenant's own")
	require.NotEqual(t, first.ID, theirs.ID)
}

func TestCreateNamesTheTableInErrors(t *testing.T) {
	t.Parallel()
	tx := setup(t)
	_, created, err := create(t, tx, idempotency.Key{TenantID: uuid.New(), Key: "k", RequestHash: []byte{1}}, "")
	require.ErrorContains(t, err, "create thing: ")
	require.NotErrorIs(t, err, errNotFound)
	require.False(t, created)
}
