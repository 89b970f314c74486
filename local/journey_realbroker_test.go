//go:build !race

package main

import (
	"testing"

	"github.com/aivedio/pipeline/shared/servicetest"
)

// TestRealBrokerJourney is TestJourneyOnEmulator on the real RocketMQ
// proxy. Built without -race: the RocketMQ client has data races of its
// own (see adapter/mq/rocketmq).
func TestRealBrokerJourney(t *testing.T) {
	realServices(t)
	t.Setenv("ROCKETMQ_ENDPOINT", servicetest.Env(t, "RocketMQ", "ROCKETMQ_ENDPOINT"))
	runJourney(t, faultyProvider(t))
}
