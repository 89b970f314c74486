// Package rocketmqtest connects tests to the real RocketMQ proxy that
// `make test` starts, and creates throwaway topics and consumer groups for
// them with the same admin path as `adapter topics apply`.
package rocketmqtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/aivedio/pipeline/adapter/topics"
	"github.com/aivedio/pipeline/shared/catalog"
	"github.com/aivedio/pipeline/shared/config"
	"github.com/aivedio/pipeline/shared/servicetest"
)

// Config returns the RocketMQ settings of the running test broker; a missing
// broker fails the test under `make test` and skips it elsewhere.
func Config(tb testing.TB) config.RocketMQ {
	tb.Helper()
	endpoint := servicetest.Env(tb, "RocketMQ proxy", "ROCKETMQ_ENDPOINT")
	return config.RocketMQ{
		Endpoint:       endpoint,
		Namesrv:        servicetest.Env(tb, "RocketMQ name server", "ROCKETMQ_NAMESRV"),
		Cluster:        "DefaultCluster",
		AdminClasspath: servicetest.Env(tb, "RocketMQ admin jars", "ROCKETMQ_ADMIN_CLASSPATH"),
		AccessKey:      os.Getenv("ROCKETMQ_ACCESS_KEY"),
		SecretKey:      os.Getenv("ROCKETMQ_SECRET_KEY"),
	}
}

// UniqueName returns prefix plus a random suffix, so each test run reads
// only its own messages.
func UniqueName(prefix string) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%s_%s", prefix, hex.EncodeToString(b[:]))
}

// Apply creates topics and groups on the test broker, failing tb on error.
// Names must already be broker-legal; Topic.Name is used as given.
func Apply(tb testing.TB, cfg config.RocketMQ, ts []catalog.Topic, gs []catalog.Group) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	admin := &topics.Admin{Classpath: cfg.AdminClasspath, Namesrv: cfg.Namesrv, Cluster: cfg.Cluster, QueuesPerTopic: 2}
	if err := admin.Apply(ctx, ts, gs); err != nil {
		tb.Fatalf("create test topics and groups: %v", err)
	}
}
