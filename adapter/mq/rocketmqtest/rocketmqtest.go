// Package rocketmqtest connects tests to the real RocketMQ proxy that
// `make test` starts, and creates throwaway topics and consumer groups for
// them with the same admin path as `adapter topics apply`.
package rocketmqtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/aivedio/pipeline/adapter/mq/rocketmq"
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
		ClientLogLevel: os.Getenv("ROCKETMQ_CLIENT_LOG_LEVEL"),
		ClientLogDir:   os.Getenv("ROCKETMQ_CLIENT_LOG_DIR"),
	}
}

// UniqueName returns prefix plus a random suffix, so each test run reads
// only its own messages.
func UniqueName(prefix string) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%s_%s", prefix, hex.EncodeToString(b[:]))
}

// Apply creates topics and groups on the test broker, failing tb on error,
// and returns once the proxy routes every topic. Names must already be
// broker-legal; Topic.Name is used as given.
func Apply(tb testing.TB, cfg config.RocketMQ, ts []catalog.Topic, gs []catalog.Group) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	admin := &topics.Admin{Classpath: cfg.AdminClasspath, Namesrv: cfg.Namesrv, Cluster: cfg.Cluster, QueuesPerTopic: 2}
	if err := admin.Apply(ctx, ts, gs); err != nil {
		tb.Fatalf("create test topics and groups: %v", err)
	}
	for _, topic := range ts {
		if err := awaitRoute(ctx, cfg, topic.BrokerName()); err != nil {
			tb.Fatalf("created topic %s has no route at the proxy: %v", topic.BrokerName(), err)
		}
	}
}

// awaitRoute returns once the proxy has a readable route for topic. The
// broker registers a topic it created with the name server a moment after
// the admin command returns: a client that looks the route up in between
// finds none, and on a loaded machine its next lookup comes after a test's
// deadline.
func awaitRoute(ctx context.Context, cfg config.RocketMQ, topic string) error {
	for {
		n, err := rocketmq.QueryRoute(ctx, cfg, topic, 5*time.Second)
		if err == nil && n > 0 {
			return nil
		}
		if err == nil {
			err = errors.New("no readable queue")
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// ACL is the second test cluster, the one with ACL 2.0 on: Admin signs as
// its super user, and users made with GrantUser sign as themselves.
type ACL struct {
	Endpoint, Namesrv, Cluster string
	Admin                      *topics.Admin
}

// ACLCluster returns the ACL test cluster; a missing one fails the test
// under `make test` and skips it elsewhere.
func ACLCluster(tb testing.TB) ACL {
	tb.Helper()
	a := ACL{
		Endpoint: servicetest.Env(tb, "RocketMQ proxy with ACL", "ROCKETMQ_ACL_ENDPOINT"),
		Namesrv:  servicetest.Env(tb, "RocketMQ name server with ACL", "ROCKETMQ_ACL_NAMESRV"),
		Cluster:  servicetest.Env(tb, "RocketMQ cluster with ACL", "ROCKETMQ_ACL_CLUSTER"),
	}
	a.Admin = &topics.Admin{
		Classpath:      servicetest.Env(tb, "RocketMQ admin jars", "ROCKETMQ_ADMIN_CLASSPATH"),
		Namesrv:        a.Namesrv,
		Cluster:        a.Cluster,
		AccessKey:      servicetest.Env(tb, "ACL super user", "ROCKETMQ_ACL_ADMIN_ACCESS_KEY"),
		SecretKey:      servicetest.Env(tb, "ACL super user's secret", "ROCKETMQ_ACL_ADMIN_SECRET_KEY"),
		QueuesPerTopic: 2,
	}
	return a
}

// As returns the client settings of the ACL cluster signing as user.
func (a ACL) As(user, secret string) config.RocketMQ {
	return config.RocketMQ{Endpoint: a.Endpoint, Namesrv: a.Namesrv, Cluster: a.Cluster, AccessKey: user, SecretKey: secret}
}

// ClientLeaks are the goroutines RocketMQ client v5.1.4 leaves behind for
// good: it never stops what a started client sets up (its client manager's
// tickers, its telemetry stream, its gRPC connection and its log file's mill
// goroutine outlive GracefulStop). Tests that drive the real client ignore
// them in their goleak checks; the race-enabled pass, which runs no real
// client, keeps checking everything else.
func ClientLeaks() []goleak.Option {
	const rmq = "github.com/apache/rocketmq-clients/golang/v5"
	return []goleak.Option{
		goleak.IgnoreTopFunction(rmq + "/pkg/ticker.Tick.func1"),
		goleak.IgnoreAnyFunction(rmq + ".(*defaultClientManager).startUp.func1"),
		goleak.IgnoreAnyFunction(rmq + ".(*defaultClientManager).startUp.func2"),
		goleak.IgnoreAnyFunction(rmq + ".(*defaultClientManager).startUp.func3"),
		goleak.IgnoreAnyFunction(rmq + ".(*defaultClientManager).startUp.func4"),
		goleak.IgnoreAnyFunction(rmq + ".(*defaultClientSession).startUp.func1"),
		goleak.IgnoreTopFunction("github.com/natefinch/lumberjack.(*Logger).millRun"),
		goleak.IgnoreAnyFunction("google.golang.org/grpc/internal/transport.(*http2Client).reader"),
		goleak.IgnoreAnyFunction("google.golang.org/grpc/internal/transport.(*loopyWriter).run"),
		goleak.IgnoreTopFunction("google.golang.org/grpc/internal/grpcsync.(*CallbackSerializer).run"),
		goleak.IgnoreTopFunction("google.golang.org/grpc.newClientStreamWithParams.func4"),
	}
}
