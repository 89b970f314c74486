// Package dlq drains a consumer group's dead-letter topic into
// message_quarantine: `go run ./adapter dlq drain --group <cg>`.
//
// A message lands in "%DLQ%<group>" once the group's maximum delivery
// attempts ran out (docs/design.md §6). The [Drainer] reads that topic as the
// drain group ([catalog.DLQDrain]) and records each message whole, with
// source DLQ, so that an operator can inspect and replay it.
//
// # Guarantee
//
// No dead letter is lost. A message is ACKed only after its quarantine row
// is committed; when the write fails the message goes back to the broker
// (its invisible duration becomes [Params.RetryDelay]) and comes again
// later. The write is idempotent on (consumer group, broker message id), so
// a drainer that dies between the write and the ACK, a redelivery, or a
// second copy of the same message leaves exactly one row; a message the
// source adapter already quarantined keeps its first row and is ACKed. A
// drainer can therefore be stopped or killed at any moment and started
// again, and several drainers may read the same dead-letter topic.
//
// The broker counts attempts on in the drain group: every failed write
// spends one of the drain group's attempts (1000 for [catalog.DLQDrain]),
// so the default RetryDelay of 5 minutes lets the database be down for days
// before the broker moves a dead letter on to the drain group's own
// dead-letter topic.
//
// # A topic that does not exist yet
//
// RocketMQ creates a dead-letter topic when it moves the first message there,
// and refuses a consumer of it before that. A Drainer therefore opens its
// consumer lazily through [Params.ConsumerFunc]: an error wrapping
// [ErrNoTopic] means "nothing to drain yet", which [Drainer.DrainOnce]
// reports as zero drained and [Drainer.Run] answers by trying again after
// [Params.TopicPoll]. [OpenConsumer] is such a function for RocketMQ: it
// asks the proxy for the topic's route and starts a consumer only once the
// topic exists, because every RocketMQ client started leaves goroutines
// behind (client v5.1.4), which looking every TopicPoll must not do.
//
// # Running
//
// [Drainer.Run] drains until its context ends; every error is logged and
// retried with backoff, none is fatal. It starts no goroutines: one batch is
// handled at a time, one message after the other.
package dlq
