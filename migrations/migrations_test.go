package migrations_test

import (
	"context"
	"errors"
	"net/url"
	"testing"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/migrations"
	"github.com/aivedio/pipeline/shared/dbtest"
	"github.com/aivedio/pipeline/shared/servicetest"
)

// allTables is every table the migrations create.
var allTables = []string{
	"outbox_events", "inbox_dedup", "message_quarantine", "message_replays",
	"tenants", "api_keys", "generation_tasks", "task_attempts", "task_events", "assets", "render_jobs",
	"credit_accounts", "credit_reservations", "credit_ledger", "derivative_failures", "delivery_failures", "projects", "project_revisions", "render_chunks",
	"task_reviews", "task_resolutions", "reconcile_repairs", "slot_waits", "slot_wait_scopes", "slot_wait_tags", "scheduling_pauses",
}

// taskStates are the firm generation task states of docs/design.md §5.
var taskStates = []string{
	"QUEUED", "SUBMITTING", "WAITING_RETRY", "RECONCILING", "PROVIDER_RUNNING",
	"FETCHING", "MEDIA_PROCESSING", "SUCCEEDED", "FAILED", "CANCELED",
	"CANCELED_WITH_OUTPUT", "CANCEL_RECONCILING", "NEEDS_ATTENTION",
}

func TestUpDownUp(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := dbtest.TestSchema(t)
	schemaURL := schemaURL(t, pool)

	require.ElementsMatch(t, allTables, tables(t, pool), "after Up")
	require.NoError(t, migrations.Up(ctx, schemaURL), "Up on an up-to-date schema")

	require.NoError(t, migrations.Down(ctx, schemaURL))
	require.Empty(t, tables(t, pool), "tables after Down")
	require.Empty(t, leftovers(t, pool), "relations, functions or types after Down")
	require.NoError(t, migrations.Down(ctx, schemaURL), "Down on an empty schema")

	require.NoError(t, migrations.Up(ctx, schemaURL))
	require.ElementsMatch(t, allTables, tables(t, pool), "after Up again")
}

func TestUniqueKeys(t *testing.T) {
	t.Parallel()

	// Each case prepares what its row needs and returns a function that
	// inserts the same row (same unique key) every time it is called.
	tests := []struct {
		name       string
		constraint string
		insert     func(t *testing.T, tx pgx.Tx) func() error
	}{
		{
			name:       "inbox_dedup consumer and event",
			constraint: "inbox_dedup_pkey",
			insert: func(t *testing.T, tx pgx.Tx) func() error {
				eventID := newID(t)
				return func() error { return insertInbox(t.Context(), tx, "cg.scheduler.submit.v1", eventID) }
			},
		},
		{
			name:       "credit_ledger business type and id",
			constraint: "credit_ledger_business_key",
			insert: func(t *testing.T, tx pgx.Tx) func() error {
				tenantID := newCreditAccount(t, tx, newTenant(t, tx), 1000)
				businessID := newID(t).String()
				return func() error { return insertLedger(t.Context(), tx, tenantID, "CAPTURE", businessID) }
			},
		},
		{
			name:       "generation_tasks tenant and idempotency key",
			constraint: "generation_tasks_tenant_idempotency_key",
			insert: func(t *testing.T, tx pgx.Tx) func() error {
				tenantID := newTenant(t, tx)
				return func() error {
					_, err := insertTask(t.Context(), tx, tenantID, "idem-1", "QUEUED")
					return err
				}
			},
		},
		{
			// Seed 7.6.5's key: the same event and payload under another
			// broker message id is the same quarantined message.
			name:       "message_quarantine consumer, event and payload",
			constraint: "message_quarantine_event_payload_key",
			insert: func(t *testing.T, tx pgx.Tx) func() error {
				eventID := newID(t).String()
				return func() error { return insertQuarantine(t.Context(), tx, "cg.asset.fetch.v1", eventID) }
			},
		},
		{
			name:       "credit_reservations one per task",
			constraint: "credit_reservations_task_id_key",
			insert: func(t *testing.T, tx pgx.Tx) func() error {
				tenantID := newCreditAccount(t, tx, newTenant(t, tx), 1000)
				taskID := newTask(t, tx, tenantID)
				return func() error { return insertReservation(t.Context(), tx, tenantID, taskID) }
			},
		},
		{
			name:       "task_attempts provider idempotency key",
			constraint: "task_attempts_provider_idempotency_key_key",
			insert: func(t *testing.T, tx pgx.Tx) func() error {
				taskID := newTask(t, tx, newTenant(t, tx))
				key, attemptNo := newID(t).String(), 0
				return func() error {
					attemptNo++ // a new attempt reusing the key
					return insertAttempt(t.Context(), tx, taskID, attemptNo, key)
				}
			},
		},
		{
			name:       "task_events one row per version",
			constraint: "task_events_task_version",
			insert: func(t *testing.T, tx pgx.Tx) func() error {
				taskID := newTask(t, tx, newTenant(t, tx))
				return func() error {
					_, err := tx.Exec(t.Context(),
						`INSERT INTO task_events (task_id, from_status, to_status, version) VALUES ($1, 'QUEUED', 'SUBMITTING', 2)`,
						taskID)
					return err
				}
			},
		},
		{
			name:       "assets one derivative of a kind per source",
			constraint: "assets_source_kind",
			insert: func(t *testing.T, tx pgx.Tx) func() error {
				tenantID := newTenant(t, tx)
				sourceID := newAsset(t, tx, tenantID, "SOURCE", nil)
				return func() error {
					_, err := insertAsset(t.Context(), tx, tenantID, "PROXY", &sourceID)
					return err
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tx := dbtest.TestTx(t)
			insert := tt.insert(t, tx)

			require.NoError(t, insert(), "first insert")
			_, err := tx.Exec(t.Context(), "SAVEPOINT duplicate") // rootIndex reads after the violation
			require.NoError(t, err)
			err = insert()
			_, rerr := tx.Exec(t.Context(), "ROLLBACK TO SAVEPOINT duplicate")
			require.NoError(t, rerr)
			requireSQLState(t, err, pgerrcode.UniqueViolation)
			var pgErr *pgconn.PgError
			require.ErrorAs(t, err, &pgErr)
			require.Equal(t, tt.constraint, rootIndex(t, tx, pgErr.ConstraintName))
		})
	}
}

func TestGenerationTaskStatus(t *testing.T) {
	t.Parallel()

	t.Run("accepts every firm state", func(t *testing.T) {
		t.Parallel()
		tx := dbtest.TestTx(t)
		tenantID := newTenant(t, tx)
		for _, state := range taskStates {
			_, err := insertTask(t.Context(), tx, tenantID, "key-"+state, state)
			require.NoError(t, err, state)
		}
	})
	for _, state := range []string{"RUNNING", "queued", ""} {
		t.Run("rejects "+state, func(t *testing.T) {
			t.Parallel()
			tx := dbtest.TestTx(t)
			_, err := insertTask(t.Context(), tx, newTenant(t, tx), "key", state)
			requireSQLState(t, err, pgerrcode.CheckViolation)
		})
	}
	t.Run("rejects an unknown transition target", func(t *testing.T) {
		t.Parallel()
		tx := dbtest.TestTx(t)
		taskID := newTask(t, tx, newTenant(t, tx))
		_, err := tx.Exec(t.Context(),
			`INSERT INTO task_events (task_id, from_status, to_status, version) VALUES ($1, 'QUEUED', 'DONE', 2)`, taskID)
		requireSQLState(t, err, pgerrcode.CheckViolation)
	})
}

func TestChecks(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name string
		do   func(t *testing.T, tx pgx.Tx) error
	}{
		{"progress above 100", func(t *testing.T, tx pgx.Tx) error {
			taskID := newTask(t, tx, newTenant(t, tx))
			_, err := tx.Exec(t.Context(), `UPDATE generation_tasks SET progress = 101 WHERE task_id = $1`, taskID)
			return err
		}},
		{"inbox result code", func(t *testing.T, tx pgx.Tx) error {
			_, err := tx.Exec(t.Context(),
				`INSERT INTO inbox_dedup (consumer_name, event_id, result_code, payload_hash) VALUES ('cg', $1, 'MAYBE', $2)`,
				newID(t), hash("x"))
			return err
		}},
		{"negative balance", func(t *testing.T, tx pgx.Tx) error {
			tenantID := newCreditAccount(t, tx, newTenant(t, tx), 10)
			_, err := tx.Exec(t.Context(), `UPDATE credit_accounts SET balance = balance - 11 WHERE tenant_id = $1`, tenantID)
			return err
		}},
		{"settled reservation without settled_at", func(t *testing.T, tx pgx.Tx) error {
			tenantID := newCreditAccount(t, tx, newTenant(t, tx), 1000)
			taskID := newTask(t, tx, tenantID)
			require.NoError(t, insertReservation(t.Context(), tx, tenantID, taskID))
			_, err := tx.Exec(t.Context(), `UPDATE credit_reservations SET status = 'CAPTURED' WHERE task_id = $1`, taskID)
			return err
		}},
		{"derived asset without source", func(t *testing.T, tx pgx.Tx) error {
			_, err := insertAsset(t.Context(), tx, newTenant(t, tx), "THUMBNAIL", nil)
			return err
		}},
		{"quarantine source", func(t *testing.T, tx pgx.Tx) error {
			_, err := tx.Exec(t.Context(), `INSERT INTO message_quarantine
				(consumer_name, message_id, topic, error_class, error_code, category, delivery_attempt, body, source)
				VALUES ('cg', 'm1', 'asset.fetch', 'PERMANENT', 'BAD', 'DATA_DEFECT', 1, '', 'SOMEWHERE')`)
			return err
		}},
		{"quarantine category", func(t *testing.T, tx pgx.Tx) error {
			_, err := tx.Exec(t.Context(), `INSERT INTO message_quarantine
				(consumer_name, message_id, topic, error_class, error_code, category, delivery_attempt, body, source)
				VALUES ('cg', 'm1', 'asset.fetch', 'PERMANENT', 'BAD', 'BAD_LUCK', 1, '', 'ADAPTER')`)
			return err
		}},
		{"discard without its audit", func(t *testing.T, tx pgx.Tx) error {
			_, err := tx.Exec(t.Context(), `INSERT INTO message_quarantine
				(consumer_name, message_id, topic, error_class, error_code, category, delivery_attempt, body, source, status, discarded_at)
				VALUES ('cg', 'm1', 'asset.fetch', 'PERMANENT', 'BAD', 'DATA_DEFECT', 1, '', 'ADAPTER', 'DISCARDED', now())`)
			return err
		}},
		{"half a relay lease", func(t *testing.T, tx pgx.Tx) error {
			eventID := newOutboxEvent(t, tx)
			_, err := tx.Exec(t.Context(), `UPDATE outbox_events SET lease_owner = 'relay-1' WHERE event_id = $1`, eventID)
			return err
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			requireSQLState(t, tt.do(t, dbtest.TestTx(t)), pgerrcode.CheckViolation)
		})
	}
}

func TestAppendOnlyTables(t *testing.T) {
	t.Parallel()

	t.Run("task_events", func(t *testing.T) {
		t.Parallel()
		tx := dbtest.TestTx(t)
		taskID := newTask(t, tx, newTenant(t, tx))
		_, err := tx.Exec(t.Context(),
			`INSERT INTO task_events (task_id, to_status, version, reason) VALUES ($1, 'QUEUED', 1, 'created')`, taskID)
		require.NoError(t, err)
		_, err = tx.Exec(t.Context(), `UPDATE task_events SET reason = 'edited' WHERE task_id = $1`, taskID)
		requireSQLState(t, err, pgerrcode.RestrictViolation)
	})
	t.Run("credit_ledger", func(t *testing.T) {
		t.Parallel()
		tx := dbtest.TestTx(t)
		tenantID := newCreditAccount(t, tx, newTenant(t, tx), 1000)
		require.NoError(t, insertLedger(t.Context(), tx, tenantID, "TOP_UP", newID(t).String()))
		_, err := tx.Exec(t.Context(), `DELETE FROM credit_ledger WHERE tenant_id = $1`, tenantID)
		requireSQLState(t, err, pgerrcode.RestrictViolation)
	})
}

func TestOutboxPendingIndexIsPartial(t *testing.T) {
	t.Parallel()
	tx := dbtest.TestTx(t)

	var def string
	err := tx.QueryRow(t.Context(), `SELECT indexdef FROM pg_indexes
		WHERE schemaname = current_schema() AND tablename = 'outbox_events' AND indexname = 'outbox_events_pending_idx'`).Scan(&def)
	require.NoError(t, err)
	require.Contains(t, def, "(available_at, created_at)")
	require.Contains(t, def, "WHERE (published_at IS NULL)")
}

func TestOutboxInsertNotifies(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	pool := dbtest.TestSchema(t)

	listener, err := pool.Acquire(ctx)
	require.NoError(t, err)
	defer listener.Release()
	_, err = listener.Exec(ctx, "LISTEN outbox_events")
	require.NoError(t, err)

	// Two rows in one statement: the statement-level trigger notifies once
	// the transaction commits.
	_, err = pool.Exec(ctx, `INSERT INTO outbox_events
		(event_id, event_type, producer, topic, tag, message_group, aggregate_type, aggregate_id, tenant_id, payload, occurred_at)
		SELECT gen_random_uuid(), 'task.state.changed', 'api', 'generation.state.fifo', 'task.state.changed', $1,
			'generation_task', $1, $2, '{}', now()
		FROM generate_series(1, 2)`,
		newID(t).String(), newID(t))
	require.NoError(t, err)

	n, err := listener.Conn().WaitForNotification(ctx)
	require.NoError(t, err)
	require.Equal(t, "outbox_events", n.Channel)
	require.Empty(t, n.Payload)
}

func TestBadURL(t *testing.T) {
	t.Parallel()
	ctx := t.Context()

	err := migrations.Up(ctx, "mysql://root@localhost/db")
	require.ErrorContains(t, err, "apply migrations")
	require.ErrorContains(t, err, `scheme "mysql"`)

	err = migrations.Down(ctx, "postgres://user:s3cret@host:port/db")
	require.ErrorContains(t, err, "revert migrations")
	require.NotContains(t, err.Error(), "s3cret", "errors must not repeat the password")
}

func TestCanceledContext(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(t.Context())
	cancel()

	err := migrations.Up(ctx, "postgres://127.0.0.1:1/none")
	require.ErrorIs(t, err, context.Canceled)
}

// requireSQLState asserts that err is a PostgreSQL error with the given code.
func requireSQLState(t *testing.T, err error, code string) {
	t.Helper()
	var pgErr *pgconn.PgError
	require.Truef(t, errors.As(err, &pgErr), "want SQLSTATE %s, got %v", code, err)
	require.Equalf(t, code, pgErr.Code, "SQLSTATE (%s)", pgErr.Message)
}

// schemaURL is DATABASE_URL pointed at the pool's schema.
func schemaURL(t *testing.T, pool *pgxpool.Pool) string {
	t.Helper()
	var schema string
	require.NoError(t, pool.QueryRow(t.Context(), "SELECT current_schema()").Scan(&schema))
	u, err := url.Parse(servicetest.Env(t, "PostgreSQL", "DATABASE_URL"))
	require.NoError(t, err)
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String()
}

// rootIndex is the index a violated constraint belongs to: a partition's
// index (inbox_dedup_p20261201_pkey) is reported as the partitioned
// table's (inbox_dedup_pkey), which is what the migrations name.
func rootIndex(t *testing.T, q querier, name string) string {
	t.Helper()
	var root string
	require.NoError(t, q.QueryRow(t.Context(), `SELECT coalesce(pg_partition_root(to_regclass($1))::text, $1)`, name).Scan(&root))
	return root
}

// tables lists the pool's schema's tables, leaving out golang-migrate's own
// and the partitions, which maintenance creates and drops by date.
func tables(t *testing.T, pool *pgxpool.Pool) []string {
	t.Helper()
	rows, err := pool.Query(t.Context(), `SELECT relname::text FROM pg_class
		WHERE relnamespace = current_schema()::regnamespace AND relkind IN ('r', 'p') AND NOT relispartition
			AND relname <> 'schema_migrations'`)
	require.NoError(t, err)
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return names
}

// leftovers lists any relation, function or type in the pool's schema other
// than golang-migrate's table, its index and its row types.
func leftovers(t *testing.T, pool *pgxpool.Pool) []string {
	t.Helper()
	rows, err := pool.Query(t.Context(), `
		SELECT 'relation ' || relname FROM pg_class
		WHERE relnamespace = current_schema()::regnamespace AND relname NOT IN ('schema_migrations', 'schema_migrations_pkey')
		UNION ALL
		SELECT 'function ' || proname FROM pg_proc WHERE pronamespace = current_schema()::regnamespace
		UNION ALL
		SELECT 'type ' || typname FROM pg_type
		WHERE typnamespace = current_schema()::regnamespace AND typname NOT IN ('schema_migrations', '_schema_migrations')`)
	require.NoError(t, err)
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return names
}
