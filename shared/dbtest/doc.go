// Package dbtest gives tests a real, migrated PostgreSQL, the way river's
// test helpers do. It is for tests only; production code never imports it.
//
// # Which helper
//
// [TestTx] is the cheap default: a transaction in a schema migrated once per
// test binary, rolled back when the test ends, so nothing a test writes is
// ever seen by another. Use it whenever the code under test accepts a
// transaction (or a pgx.Tx-shaped querier).
//
// [TestSchema] gives a test its own freshly migrated schema and a pool whose
// connections use it. Use it when the test needs what one transaction cannot
// give: real commits, several connections, SKIP LOCKED between workers,
// LISTEN/NOTIFY, or running the migrations up and down. The schema is dropped
// when the test ends.
//
// Both locate PostgreSQL through DATABASE_URL via servicetest: a missing
// database fails the test under `make test` and CI, and skips it elsewhere.
//
// # Parallel tests
//
// Both helpers are safe to call from parallel tests. Schemas from
// [TestSchema] never collide: each has a random name, its own
// schema_migrations table and its own migration lock. Transactions from
// [TestTx] share one schema, so rows they insert under the same unique key
// wait on each other until one rolls back: give rows random ids and keys, as
// factories should anyway.
//
// The helpers open plain connections and close them in t.Cleanup, and start
// no goroutine that outlives the test, so packages using goleak can use them.
package dbtest
