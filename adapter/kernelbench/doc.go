// Package kernelbench measures the pipeline's kernel end to end on the real
// services, beside the two baselines that bound it, in one process so that
// the figures are comparable. It has no code of its own: everything is in
// its benchmarks, which need PostgreSQL and the RocketMQ proxy that
// `make services-up` starts.
//
// # What is measured
//
// BenchmarkKernel drives the whole reliable path: a producer commits events
// with outbox.Write (50 per transaction, each with a counter row), the relay
// (adapter/relay) publishes them to RocketMQ, and the source adapter
// (adapter/source) receives them and delivers each in process to a handler
// whose only work is one inbox.Do transaction with a versioned UPDATE of the
// event's counter row; then the source ACKs. One b.Loop iteration is a burst
// of 2,000 events from the first commit to the last ACK: ns/op is per
// burst, events/s is the figure. BenchmarkKernelPaced1000 offers a steady
// 1,000 events/s (10 every 10 ms) for 3 s instead, to measure latency at
// that rate. BenchmarkKernelBatched and BenchmarkKernelBatchedPaced1000 are
// the same with the handler gathering concurrent deliveries into
// inbox.DoBatch transactions (events/tx is the mean batch).
//
// The baselines: BenchmarkBareBroker sends with the v5 producer from 8
// goroutines and receives+ACKs the way the source does, with 1 and with 4
// consumers, no database and no CloudEvents; BenchmarkPostgresOnly runs the stage transaction alone
// (inbox insert, versioned UPDATE, outbox insert, durable commit) from 4, 8
// and 16 connections. The best sub-benchmark of each is the ceiling.
//
// Before the first benchmark, untimed rounds of messages warm the proxy (a
// JVM) up until their rate stops rising (20 s to 2 min): freshly started it
// spends three times the CPU per message it does once its JIT compiler has
// seen the send, receive and ACK paths, and a production broker runs warm.
//
// # Latency
//
// Each event's payload carries the producer's clock just before the INSERT
// of the transaction that commits it, so "commit" latencies include the
// producer's own INSERT and COMMIT (about a millisecond). The handler cannot
// see the ACK, so the consumer is wrapped instead: p50-ms and p99-ms run
// from commit to "settled" (the deliverer returned success, so the inbox
// transaction committed); ack-p50-ms and ack-p99-ms run from commit to the
// return of the source's Ack call. The log breaks the ACK total down by the
// message's born timestamp (set by the relay's producer when it sends) and
// the moment Receive returned it, and adds the relay's send latency and the
// CPU each process used per 1,000 events during the timed part; "other"
// CPU there means another workload shared the machine, and that run's
// figures are not comparable.
//
// # Running
//
//	source /tmp/aivedio-services/env
//	go test -run='^$' -bench='Kernel|BareBroker|PostgresOnly' -benchtime=3x ./adapter/kernelbench/
//
// The benchmarks drive the real RocketMQ client, whose own data race makes
// them `//go:build !race` (see adapter/mq/rocketmq).
package kernelbench
