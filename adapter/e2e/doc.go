// Package e2e proves the messaging kernel's guarantee end to end on the
// real RocketMQ proxy and PostgreSQL: outbox -> relay -> broker -> source
// adapter -> stage function -> inbox transaction, with processes failing at
// the worst moments, and every business effect counted exactly once.
//
// It holds tests only. They drive the real RocketMQ client, whose own data
// races keep them out of -race builds (see adapter/mq/rocketmq).
//
// The seed's anomaly table, row by row, with the test of each row, is the
// package doc of adapter/e2e/anomaly.
package e2e
