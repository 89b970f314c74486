package dbtest_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/shared/dbtest"
)

func TestTestSchema(t *testing.T) {
	t.Parallel()

	t.Run("is migrated and isolated", func(t *testing.T) {
		t.Parallel()
		a, b := dbtest.TestSchema(t), dbtest.TestSchema(t)
		schemaA, schemaB := currentSchema(t, a), currentSchema(t, b)
		require.True(t, strings.HasPrefix(schemaA, "test_"), schemaA)
		require.NotEqual(t, schemaA, schemaB)

		tenantID := uuid.New()
		_, err := a.Exec(t.Context(), `INSERT INTO tenants (tenant_id, name) VALUES ($1, 'acme')`, tenantID)
		require.NoError(t, err)
		require.Equal(t, 1, countTenant(t, a, tenantID))
		require.Equal(t, 0, countTenant(t, b, tenantID), "a row committed in one schema is visible in another")
	})

	t.Run("is dropped in cleanup", func(t *testing.T) {
		t.Parallel()
		var schema string
		t.Run("use", func(t *testing.T) {
			schema = currentSchema(t, dbtest.TestSchema(t))
		})
		var exists bool
		err := dbtest.TestTx(t).QueryRow(t.Context(),
			`SELECT EXISTS (SELECT FROM pg_namespace WHERE nspname = $1)`, schema).Scan(&exists)
		require.NoError(t, err)
		require.False(t, exists, "schema %s still exists", schema)
	})

	t.Run("in parallel", func(t *testing.T) {
		t.Parallel()
		for i := range 4 {
			t.Run("", func(t *testing.T) {
				t.Parallel()
				pool := dbtest.TestSchema(t)
				_, err := pool.Exec(t.Context(), `INSERT INTO tenants (name) VALUES ($1)`, fmt.Sprint("tenant ", i))
				require.NoError(t, err)
			})
		}
	})
}

func TestTestTx(t *testing.T) {
	t.Parallel()

	t.Run("is rolled back in cleanup", func(t *testing.T) {
		t.Parallel()
		tenantID := uuid.New()
		t.Run("insert", func(t *testing.T) {
			_, err := dbtest.TestTx(t).Exec(t.Context(), `INSERT INTO tenants (tenant_id, name) VALUES ($1, 'acme')`, tenantID)
			require.NoError(t, err)
		})
		var n int
		err := dbtest.TestTx(t).QueryRow(t.Context(), `SELECT count(*) FROM tenants WHERE tenant_id = $1`, tenantID).Scan(&n)
		require.NoError(t, err)
		require.Zero(t, n, "the row outlived its test's transaction")
	})

	t.Run("shares one migrated schema", func(t *testing.T) {
		t.Parallel()
		var a, b string
		require.NoError(t, dbtest.TestTx(t).QueryRow(t.Context(), "SELECT current_schema()").Scan(&a))
		require.NoError(t, dbtest.TestTx(t).QueryRow(t.Context(), "SELECT current_schema()").Scan(&b))
		require.Equal(t, a, b)
		require.True(t, strings.HasPrefix(a, "dbtest_"), a)
	})

	t.Run("survives a test that ends the transaction itself", func(t *testing.T) {
		t.Parallel()
		tx := dbtest.TestTx(t)
		require.NoError(t, tx.Rollback(t.Context()))
	})
}

func currentSchema(t *testing.T, pool *pgxpool.Pool) string {
	t.Helper()
	var schema string
	require.NoError(t, pool.QueryRow(t.Context(), "SELECT current_schema()").Scan(&schema))
	return schema
}

func countTenant(t *testing.T, pool *pgxpool.Pool, tenantID uuid.UUID) int {
	t.Helper()
	var n int
	require.NoError(t, pool.QueryRow(t.Context(), `SELECT count(*) FROM tenants WHERE tenant_id = $1`, tenantID).Scan(&n))
	return n
}
