// Package migrations holds the PostgreSQL schema of the pipeline as numbered
// golang-migrate files and applies them.
//
// # Files
//
// Each change is a pair NNNNNN_name.up.sql / NNNNNN_name.down.sql embedded in
// [FS]. A down file drops exactly what its up file created, so [Down] leaves
// nothing but golang-migrate's own schema_migrations table behind. The files
// are grouped by concern:
//
//   - 000001_messaging: outbox_events, inbox_dedup, message_quarantine,
//     message_replays.
//   - 000002_tasks: tenants, api_keys, generation_tasks, task_attempts,
//     task_events, assets, render_jobs.
//   - 000003_billing: credit_accounts, credit_reservations, credit_ledger.
//   - 000012_partitioned_logs: outbox_events and inbox_dedup partitioned
//     by RANGE (event_id), a partition per UTC day, so that package
//     shared/retention can prune them by dropping whole partitions.
//
// Why each table, key and check exists is written beside it in the SQL and
// stored with COMMENT ON, so psql's \d+ shows it too.
//
// # Guarantees
//
// Each file is sent in one simple-protocol statement, which PostgreSQL runs as
// one implicit transaction: a migration is applied whole or not at all. If one
// fails, golang-migrate still records its version as dirty; fix the file and
// clear the flag with `migrate force` before applying again.
//
// Migrations take golang-migrate's advisory lock, derived from the database,
// the schema and the migrations table, so concurrent [Up] calls against one
// schema wait for each other, and calls against different schemas do not.
//
// # Schemas
//
// Objects are created unqualified, in the first schema of the connection's
// search_path, together with the schema_migrations table. Point a migration at
// another schema with the search_path URL parameter, as dbtest does:
//
//	postgres://user@host/db?search_path=tenant_x
package migrations
