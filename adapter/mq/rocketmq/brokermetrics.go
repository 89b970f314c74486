package rocketmq

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/aivedio/pipeline/shared/config"
)

// BrokerSeries are the broker's own series, from RocketMQ 5's Prometheus
// exporter (broker.conf metricsExporterType=PROM, scraped on
// metricsPromExporterPort, 5557 by default), that the shipped alert rules
// and dashboard use, each with the labels they select or group by. They are
// what the seed asks to take from the broker rather than guess: per topic
// and group lag in messages, the age of the oldest unconsumed message,
// consume rate, storage size, retention window (the age of the oldest
// stored message) and whether the broker takes writes.
// TestRealBrokerMetrics checks that the broker exports each of them.
//
// The exporter names series with their unit (a gauge of milliseconds is
// rocketmq_..._milliseconds); is_retry and is_system tell a group's own
// messages from its retry topic's and the broker's internal ones.
var BrokerSeries = map[string][]string{
	"rocketmq_messages_in_total":                         {"topic", "message_type", "node_id"},
	"rocketmq_messages_out_total":                        {"topic", "consumer_group", "node_id"},
	"rocketmq_consumer_lag_messages":                     {"topic", "consumer_group", "is_retry", "is_system", "node_id"},
	"rocketmq_consumer_lag_latency_milliseconds":         {"topic", "consumer_group", "is_retry", "is_system", "node_id"},
	"rocketmq_consumer_ready_messages":                   {"topic", "consumer_group", "is_retry", "is_system", "node_id"},
	"rocketmq_consumer_queueing_latency_milliseconds":    {"topic", "consumer_group", "is_retry", "is_system", "node_id"},
	"rocketmq_storage_size_bytes":                        {"node_id"},
	"rocketmq_storage_message_reserve_time_milliseconds": {"node_id"},
	"rocketmq_broker_permission":                         {"node_id"},
}

// Reachable reports whether a proxy of cfg.Endpoint (one address, or
// several separated by ';' as the client takes them) accepts a connection
// within two seconds: what an adapter's /readyz adds to its database
// check, since a relay or source that cannot reach the proxy does no work.
func Reachable(ctx context.Context, cfg config.RocketMQ) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	var (
		d    net.Dialer
		errs []error
	)
	for _, addr := range strings.Split(cfg.Endpoint, ";") {
		conn, err := d.DialContext(ctx, "tcp", strings.TrimSpace(addr))
		if err == nil {
			return conn.Close()
		}
		errs = append(errs, err)
	}
	return fmt.Errorf("rocketmq proxy %s unreachable: %w", cfg.Endpoint, errors.Join(errs...))
}
