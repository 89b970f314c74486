package tenant_test

import (
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/shared/dbtest"
	"github.com/aivedio/pipeline/shared/tenant"
)

func TestCreateThenAuthenticate(t *testing.T) {
	t.Parallel()
	pool := dbtest.TestSchema(t)
	var c tenant.Created
	require.NoError(t, pgx.BeginFunc(t.Context(), pool, func(tx pgx.Tx) error {
		var err error
		c, err = tenant.Create(t.Context(), tx, tenant.NewTenant{Name: "acme", Priority: 3, Credits: 500}, tenant.RoleTenant)
		return err
	}))
	require.True(t, len(c.Key) > 40)

	p, err := tenant.Authenticate(t.Context(), pool, c.Key)
	require.NoError(t, err)
	require.Equal(t, tenant.Principal{TenantID: c.TenantID, KeyID: c.KeyID, Role: tenant.RoleTenant, Priority: 3}, p)

	var stored int
	require.NoError(t, pool.QueryRow(t.Context(), `SELECT count(*) FROM api_keys WHERE key_hash = convert_to($1, 'UTF8')`, c.Key).Scan(&stored))
	require.Zero(t, stored, "the key itself is never stored")

	for _, bad := range []string{"", "Bearer x", c.Key + "x", tenant.KeyPrefix + "nope"} {
		_, err := tenant.Authenticate(t.Context(), pool, bad)
		require.ErrorIs(t, err, tenant.ErrUnauthorized, "key %q", bad)
	}

	_, err = pool.Exec(t.Context(), `UPDATE api_keys SET revoked_at = now() WHERE key_id = $1`, c.KeyID)
	require.NoError(t, err)
	_, err = tenant.Authenticate(t.Context(), pool, c.Key)
	require.ErrorIs(t, err, tenant.ErrUnauthorized)
}

func TestCreateRefusesBadInput(t *testing.T) {
	t.Parallel()
	pool := dbtest.TestSchema(t)
	err := pgx.BeginFunc(t.Context(), pool, func(tx pgx.Tx) error {
		_, err := tenant.Create(t.Context(), tx, tenant.NewTenant{Name: " "}, tenant.RoleTenant)
		return err
	})
	require.ErrorContains(t, err, "name")
	err = pgx.BeginFunc(t.Context(), pool, func(tx pgx.Tx) error {
		_, err := tenant.Create(t.Context(), tx, tenant.NewTenant{Name: "x"}, "root")
		return err
	})
	require.ErrorContains(t, err, "role")
}
