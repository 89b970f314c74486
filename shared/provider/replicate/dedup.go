package replicate

// DedupsByIdempotencyKey says the pipeline may send a submit again under
// the same Idempotency-Key (after a 5xx, or a process that died mid-call)
// and reach the same prediction. Replicate documents no such key; the
// simulator honours it, and the README states the limit: against
// Replicate itself a resend is the one place a second prediction can start,
// and a lost answer is still always looked up first.
func (c *Client) DedupsByIdempotencyKey() bool { return true }
