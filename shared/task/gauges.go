package task

import (
	"context"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
)

// WatchedStates are the task states an operator is alerted on (seed
// 7.13.5): a lookup under way, a cancel whose outcome is not known yet,
// and tasks that need a person.
var WatchedStates = []Status{Reconciling, CancelReconciling, NeedsAttention}

var (
	tasksInStateDesc = prometheus.NewDesc("aivedio_tasks_in_state",
		"Generation tasks now in a watched state (RECONCILING, CANCEL_RECONCILING, NEEDS_ATTENTION), read from PostgreSQL by one exporter.",
		[]string{"status"}, nil)
	submitUnknownDesc = prometheus.NewDesc("aivedio_attempts_submit_unknown",
		"Provider attempts whose submit answer was lost (SUBMIT_UNKNOWN): accepted or not is unknown until the reconciler looks.", nil, nil)
)

// StateGauges exports the count of tasks in each of [WatchedStates] and
// of SUBMIT_UNKNOWN attempts, read from PostgreSQL on scrape, by one
// process of all those that register it: the one holding a session
// advisory lock on a connection of its own, outside the pool. The others
// export nothing, so the counts are read once per scrape interval, not
// once per replica, and another replica takes over at its next scrape
// when the holder dies (its session ends). Close the collector when the
// process stops, so that the lock is given up at once.
func StateGauges(pool *pgxpool.Pool) *StateGaugesCollector {
	return &StateGaugesCollector{config: pool.Config().ConnConfig}
}

// StateGaugesCollector is the collector of [StateGauges].
type StateGaugesCollector struct {
	config *pgx.ConnConfig
	mu     sync.Mutex
	// conn is a connection of its own, outside the pool (which would wait
	// for it on Close), holding the advisory lock while this process
	// exports.
	conn *pgx.Conn
}

// Close gives the lock up.
func (g *StateGaugesCollector) Close() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.drop()
}

func (g *StateGaugesCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- tasksInStateDesc
	ch <- submitUnknownDesc
}

func (g *StateGaugesCollector) Collect(ch chan<- prometheus.Metric) {
	g.mu.Lock()
	defer g.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if !g.holdLock(ctx) {
		return
	}
	counts := make(map[Status]int64, len(WatchedStates))
	states := make([]string, len(WatchedStates))
	for i, s := range WatchedStates {
		states[i] = string(s)
	}
	rows, err := g.conn.Query(ctx, `SELECT status, count(*) FROM generation_tasks WHERE status = ANY($1) GROUP BY status`, states)
	if err != nil {
		g.drop()
		return
	}
	for rows.Next() {
		var s Status
		var n int64
		if rows.Scan(&s, &n) == nil {
			counts[s] = n
		}
	}
	rows.Close()
	if rows.Err() != nil {
		g.drop()
		return
	}
	var unknown int64
	if err := g.conn.QueryRow(ctx, `SELECT count(*) FROM task_attempts WHERE status = 'SUBMIT_UNKNOWN'`).Scan(&unknown); err != nil {
		g.drop()
		return
	}
	for _, s := range WatchedStates {
		ch <- prometheus.MustNewConstMetric(tasksInStateDesc, prometheus.GaugeValue, float64(counts[s]), string(s))
	}
	ch <- prometheus.MustNewConstMetric(submitUnknownDesc, prometheus.GaugeValue, float64(unknown))
}

// holdLock reports whether this process is the exporter, taking the lock
// on a connection of its own when it is free.
func (g *StateGaugesCollector) holdLock(ctx context.Context) bool {
	if g.conn != nil {
		if g.conn.Ping(ctx) == nil {
			return true
		}
		g.drop()
	}
	conn, err := pgx.ConnectConfig(ctx, g.config.Copy())
	if err != nil {
		return false
	}
	var got bool
	// Keyed by the schema too: deployments (and test schemas) sharing a
	// database each have their exporter.
	if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock(hashtext('aivedio:state-gauges:' || current_schema()))`).Scan(&got); err != nil || !got {
		_ = conn.Close(context.Background())
		return false
	}
	g.conn = conn
	return true
}

// drop closes the connection: the session ends, and the lock with it.
func (g *StateGaugesCollector) drop() {
	if g.conn == nil {
		return
	}
	_ = g.conn.Close(context.Background())
	g.conn = nil
}
