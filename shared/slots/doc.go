// Package slots limits how many provider jobs run at once, per tenant, per
// model and per provider, with concurrency slots kept in Redis as leases.
//
// # Guarantees
//
// A scope (for example "tenant:<id>", "model:<name>", "provider:<name>") never
// has more than its Limit unexpired holders that [Limiter.Acquire] admitted.
// Acquire takes one slot in every scope it is given or in none of them, in
// one atomic step, so a refusal by one scope never leaves the holder counted
// in another.
//
// Every slot is a lease: it expires TTL after it was last acquired or renewed,
// unless [Limiter.Renew] extends it first. A holder that crashes therefore
// frees its slots by itself after at most TTL; nobody has to clean up after
// it. Expiry is judged by the Redis server clock (TIME inside the scripts), so
// processes with skewed clocks agree on it.
//
// Acquire is idempotent per holder: the same holder (one task attempt, say,
// whose message was redelivered) acquiring again renews its lease instead of
// taking a second slot. [Limiter.Release] is idempotent too.
//
// # Business waits
//
// A full scope is not a failure: Acquire returns an error matching
// [ErrNoSlot], and the caller records WAITING_RETRY with a delayed resubmit
// and returns success (docs/design.md §6). Any other error is an infrastructure
// error (Redis unreachable, a timeout) or, for [ErrInvalid], a programming
// mistake in the parameters.
//
// [Limiter.Renew] returns [ErrLeaseLost] when the lease expired before it was
// renewed (or a rebuild removed it): its slots may already belong to someone
// else. A lost lease holds nothing afterwards, in any of its scopes; acquiring
// again is the only way back in, and it succeeds only if there is room.
//
// # Redis is not the source of truth
//
// PostgreSQL knows which task attempts are in flight; Redis only mirrors that
// for speed. Losing Redis data (a restart without persistence, a failover that
// drops recent writes) can only loosen the limits, never tighten them, and
// only until the reconciler calls [Limiter.Rebuild] with the in-flight holders
// of each scope. Rebuild replaces what the scope holds; to keep a holder that
// acquired between the reconciler's query and the rebuild from being dropped,
// record the attempt in PostgreSQL before acquiring its slots.
//
// # Usage
//
//	lease, err := limiter.Acquire(ctx, slots.AcquireParams{
//		Scopes: []slots.Scope{
//			{Name: "tenant:" + tenantID, Limit: tenantLimit},
//			{Name: "model:" + model, Limit: modelLimit},
//		},
//		Holder: "attempt:" + attemptID,
//		TTL:    2 * time.Minute,
//	})
//	if errors.Is(err, slots.ErrNoSlot) {
//		// business wait: schedule a delayed resubmit, return success
//	}
//	// ... renew every TTL/3 while the provider job runs, then:
//	err = limiter.Release(context.WithoutCancel(ctx), lease)
//
// # Redis Cluster
//
// All scopes of one Acquire must live in one hash slot. With Redis Cluster,
// give [Opts.KeyPrefix] a hash tag, e.g. "{aivedio:slots}:"; scope names may
// not contain braces, so the tag in the prefix is the one that counts.
package slots
