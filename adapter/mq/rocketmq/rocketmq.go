// Package rocketmq implements the mq interfaces with the RocketMQ 5 gRPC
// client (github.com/apache/rocketmq-clients/golang/v5), talking to a
// RocketMQ proxy.
//
// # Known upstream data race
//
// Client v5.1.4 applies the settings the proxy pushes over its telemetry
// stream without a lock, while its own senders and receivers read them
// (apache/rocketmq-clients#294, #1014). The race detector reports it in any
// test that drives the real client, so those tests carry `//go:build !race`,
// are named TestRealBroker*, and `make test` runs them in a second pass
// without -race. Everything else runs with -race.
package rocketmq

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	rmq "github.com/apache/rocketmq-clients/golang/v5"
	"github.com/apache/rocketmq-clients/golang/v5/credentials"
	"github.com/apache/rocketmq-clients/golang/v5/pkg/zaplog/ctxzap"
	v2 "github.com/apache/rocketmq-clients/golang/v5/protocol/v2"

	"github.com/aivedio/pipeline/adapter/mq"
	"github.com/aivedio/pipeline/shared/config"
)

func clientConfig(cfg config.RocketMQ, group string) *rmq.Config {
	return &rmq.Config{
		Endpoint:      cfg.Endpoint,
		ConsumerGroup: group,
		Credentials:   &credentials.SessionCredentials{AccessKey: cfg.AccessKey, AccessSecret: cfg.SecretKey},
	}
}

// access marks the proxy's refusals with mq.ErrUnauthenticated or
// mq.ErrForbidden, keeping the proxy's words. The proxy answers both a bad
// signature and a missing permission with UNAUTHORIZED, told apart only by
// its message; and the client flattens the status into its own text when a
// start fails, so the text is what there is to read.
func access(err error) error {
	if err == nil {
		return nil
	}
	text := err.Error()
	if status, ok := rmq.AsErrRpcStatus(err); ok {
		switch v2.Code(status.GetCode()) {
		case v2.Code_UNAUTHORIZED, v2.Code_FORBIDDEN:
		default:
			return err
		}
	} else if !strings.Contains(text, "CODE: UNAUTHORIZED") && !strings.Contains(text, "CODE: FORBIDDEN") {
		return err
	}
	if strings.Contains(text, "CODE: FORBIDDEN") || strings.Contains(text, "no permission") {
		return fmt.Errorf("%w: %w", mq.ErrForbidden, err)
	}
	return fmt.Errorf("%w: %w", mq.ErrUnauthenticated, err)
}

// startError explains a failed client start. When the proxy refuses a
// client's settings for want of a permission, it closes the settings
// stream: the client sees only EOF.
func startError(cfg config.RocketMQ, err error) error {
	err = access(err)
	if cfg.AccessKey != "" && strings.Contains(err.Error(), "failed to sync settings") {
		return fmt.Errorf("%w (with ACL on, the proxy closes the settings stream when user %s may not publish to these topics or consume as this group: %w)",
			err, cfg.AccessKey, mq.ErrForbidden)
	}
	return err
}

// routeClientLog points the client's own zap logger where cfg says, once
// per process, before the first client starts. The client reads its log
// settings from the environment only (at init and in ResetLogger), and
// writes its console lines to os.Stdout: os.Stdout is pointed at stderr
// for the moment ResetLogger takes it, so that stdout stays the
// commands' own output.
func routeClientLog(cfg config.RocketMQ) {
	clientLogOnce.Do(func() {
		level := cmp.Or(cfg.ClientLogLevel, "warn")
		_ = os.Setenv(rmq.CLIENT_LOG_LEVEL, level)
		if level == "warn" || level == "error" {
			quietRPCLog()
		}
		if cfg.ClientLogDir != "" {
			_ = os.Setenv(rmq.CLIENT_LOG_ROOT, cfg.ClientLogDir)
			_ = os.Setenv(rmq.ENABLE_CONSOLE_APPENDER, "false")
			rmq.ResetLogger()
			return
		}
		_ = os.Setenv(rmq.ENABLE_CONSOLE_APPENDER, "true")
		stdout := os.Stdout
		os.Stdout = os.Stderr
		rmq.ResetLogger()
		os.Stdout = stdout
	})
}

var clientLogOnce sync.Once

// quietRPCLog drops the client's RPC access log. Besides its own log,
// client v5.1.4 writes one JSON line at info for every call it makes
// (Send, Ack, heartbeats...) to /tmp/rocketmq-logger.log, whatever the
// log level, through a gRPC interceptor of its connections; a failed call
// is returned to its caller all the same. The connections are made by the
// package's NewRpcClient, which takes no option from a client's config:
// wrapping it is the one way to give them a logger. Its no-op logger is
// ctxzap's, which the interceptor falls back on without one.
func quietRPCLog() {
	newRPCClient := rmq.NewRpcClient
	quiet := rmq.WithRpcClientConnOption(rmq.WithZapLogger(ctxzap.Logger(context.Background())))
	rmq.NewRpcClient = func(target string, opts ...rmq.RpcClientOption) (rmq.RpcClient, error) {
		return newRPCClient(target, append(opts[:len(opts):len(opts)], quiet)...)
	}
}

// startTries bounds the starts of a client whose start failed on the
// client's own race.
const startTries = 3

// racedStart reports a start that failed on the client's own data race
// (see the package doc): the telemetry command it was marshalling changed
// under it ("grpc: error while marshaling: ... size mismatch"). Nothing is
// wrong with the proxy or the settings, and a fresh client starts.
func racedStart(err error) bool {
	return err != nil && strings.Contains(err.Error(), "error while marshaling")
}

// startTimeout bounds a client's start: the v5 client waits for its
// settings to sync with no deadline of its own.
const startTimeout = 30 * time.Second

// startWithin runs a client's blocking Start with a deadline. On timeout
// the Start goroutine is left to finish or fail on its own: the client
// offers no way to abort it, and the caller is expected to give up.
func startWithin(start func() error, d time.Duration) error {
	done := make(chan error, 1)
	go func() { done <- start() }()
	select {
	case err := <-done:
		return err
	case <-time.After(d):
		return fmt.Errorf("not started within %s (is the proxy reachable and do the topics exist?)", d)
	}
}
