package task_test

import (
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/shared/dbtest"
	"github.com/aivedio/pipeline/shared/task"
	"github.com/aivedio/pipeline/shared/tenant"
)

// TestStateGaugesHaveOneExporter: of two processes registering the
// gauges on one database, one exports the watched states (a task moved to
// NEEDS_ATTENTION is counted there) and the other nothing; when the
// exporter's session ends, the other takes over.
func TestStateGaugesHaveOneExporter(t *testing.T) {
	t.Parallel()
	url := dbtest.TestSchemaURL(t)
	first, second := newPool(t, url), newPool(t, url)
	a, b := prometheus.NewPedanticRegistry(), prometheus.NewPedanticRegistry()
	ga, gb := task.StateGauges(first), task.StateGauges(second)
	t.Cleanup(ga.Close)
	t.Cleanup(gb.Close)
	a.MustRegister(ga)
	b.MustRegister(gb)

	require.Equal(t, 4, testutil.CollectAndCount(ga), "three states and the unknown submits")
	require.Zero(t, countOf(t, b), "the second process exports nothing while the first holds the lock")

	tb := &testBundle{pool: first}
	inTx(t, first, func(tx pgx.Tx) error {
		created, err := tenant.Create(t.Context(), tx, tenant.NewTenant{Name: "acme", Credits: 1000}, tenant.RoleTenant)
		tb.tenantID = created.TenantID
		return err
	})
	tk := tb.newTask(t, "k")
	_, err := first.Exec(t.Context(), `UPDATE generation_tasks SET status = 'NEEDS_ATTENTION', error_code = 'test', error_message = 'test' WHERE task_id = $1`, tk.ID)
	require.NoError(t, err)
	require.Equal(t, 1.0, valueOf(t, a, "aivedio_tasks_in_state", "NEEDS_ATTENTION"))
	require.Equal(t, 0.0, valueOf(t, a, "aivedio_tasks_in_state", "RECONCILING"))

	ga.Close() // the exporter's session ended
	require.Equal(t, 4, countOf(t, b), "the other process takes over")
	require.Equal(t, 1.0, valueOf(t, b, "aivedio_tasks_in_state", "NEEDS_ATTENTION"))
}

func newPool(t *testing.T, url string) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(t.Context(), url)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

func countOf(t *testing.T, reg *prometheus.Registry) int {
	t.Helper()
	families, err := reg.Gather()
	require.NoError(t, err)
	n := 0
	for _, mf := range families {
		n += len(mf.GetMetric())
	}
	return n
}

func valueOf(t *testing.T, reg *prometheus.Registry, name, status string) float64 {
	t.Helper()
	families, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range families {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "status" && l.GetValue() == status {
					return m.GetGauge().GetValue()
				}
			}
		}
	}
	t.Fatalf("no %s{status=%q}", name, status)
	return 0
}
