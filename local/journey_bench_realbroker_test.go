//go:build !race

package main

import (
	"testing"

	"github.com/aivedio/pipeline/shared/servicetest"
)

// The journey benchmark on the real RocketMQ proxy: built without -race,
// as the RocketMQ client has data races of its own (see
// adapter/mq/rocketmq), and skipped unless ROCKETMQ_ENDPOINT is set (under
// `make bench` it always is).
func init() {
	journeyBrokers = append(journeyBrokers, journeyBroker{name: "rocketmq", endpoint: func(b *testing.B) string {
		return servicetest.Env(b, "RocketMQ", "ROCKETMQ_ENDPOINT")
	}})
}
