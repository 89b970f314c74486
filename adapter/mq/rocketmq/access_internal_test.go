package rocketmq

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	rmq "github.com/apache/rocketmq-clients/golang/v5"
	v2 "github.com/apache/rocketmq-clients/golang/v5/protocol/v2"

	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/adapter/mq"
	"github.com/aivedio/pipeline/shared/config"
)

// TestAccess reads the proxy's refusals as the client hands them over: as
// a status, or flattened into the text of a failed start (TestRealBrokerACL
// sees each of these from the real proxy).
func TestAccess(t *testing.T) {
	status := func(code v2.Code, msg string) error { return &rmq.ErrRpcStatus{Code: int32(code), Message: msg} }
	for _, c := range []struct {
		name string
		err  error
		want error // nil: left as it was
	}{
		{"bad signature", status(v2.Code_UNAUTHORIZED, "check signature failed."), mq.ErrUnauthenticated},
		{"missing permission", status(v2.Code_UNAUTHORIZED, "User:relay has no permission to access Topic:x from 127.0.0.1, no matched policies."), mq.ErrForbidden},
		{"forbidden", status(v2.Code_FORBIDDEN, "forbidden"), mq.ErrForbidden},
		{"flattened at start", errors.New("failed to get topic route data result from remote during client startup, err=CODE: UNAUTHORIZED, MESSAGE: username cannot be null."), mq.ErrUnauthenticated},
		{"other status", status(v2.Code_TOPIC_NOT_FOUND, "no topic"), nil},
		{"outage", errors.New("connection refused"), nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := access(fmt.Errorf("wrapped: %w", c.err))
			for _, sentinel := range []error{mq.ErrUnauthenticated, mq.ErrForbidden} {
				if errors.Is(got, sentinel) != (sentinel == c.want) {
					t.Errorf("access(%v) = %v; is %v: %t, want %t", c.err, got, sentinel, errors.Is(got, sentinel), sentinel == c.want)
				}
			}
		})
	}
	if access(nil) != nil {
		t.Error("access(nil) is not nil")
	}
	t.Run("settings stream closed under ACL", func(t *testing.T) {
		err := startError(config.RocketMQ{AccessKey: "src-fetch"}, errors.New("startUp err=failed to sync settings during startUp: EOF"))
		if !errors.Is(err, mq.ErrForbidden) {
			t.Errorf("startError = %v, want it to wrap mq.ErrForbidden", err)
		}
		if err := startError(config.RocketMQ{}, errors.New("failed to sync settings during startUp: EOF")); errors.Is(err, mq.ErrForbidden) {
			t.Errorf("without credentials, a closed stream is no ACL refusal: %v", err)
		}
	})
}

// refusingClient is a started client whose every receive the proxy refuses.
type refusingClient struct {
	rmq.SimpleConsumer // nil: only Receive is called
	err                error
	receives           int
}

func (r *refusingClient) Receive(context.Context, int32, time.Duration) ([]*rmq.MessageView, error) {
	r.receives++
	return nil, r.err
}

// TestRefusedReceiveKeepsTheClient: a receive the ACL refuses is reported
// as such and never replaces the client (each replacement leaks goroutines
// in client v5.1.4, and a fresh client brings no new grant); other
// failures still do, after reopenAfter in a row.
func TestRefusedReceiveKeepsTheClient(t *testing.T) {
	refused := &refusingClient{err: &rmq.ErrRpcStatus{Code: int32(v2.Code_UNAUTHORIZED),
		Message: "User:src has no permission to access Group:g from 127.0.0.1, no matched policies."}}
	c := &Consumer{consumer: refused, reopenWait: time.Hour}
	for range 2 * reopenAfter {
		_, err := c.Receive(t.Context(), 1, time.Minute)
		if !errors.Is(err, mq.ErrForbidden) {
			t.Fatalf("Receive = %v, want it to wrap mq.ErrForbidden", err)
		}
	}
	if c.failures != 0 || c.current() != refused {
		t.Errorf("after %d refusals: %d failures counted, client replaced: %t", refused.receives, c.failures, c.current() != refused)
	}

	broken := &refusingClient{err: errors.New("connection reset")}
	c = &Consumer{consumer: broken, reopenWait: time.Hour, nextReopen: time.Now().Add(time.Hour)}
	for range reopenAfter {
		_, _ = c.Receive(t.Context(), 1, time.Minute)
	}
	if c.failures != reopenAfter {
		t.Errorf("other failures counted %d times, want %d", c.failures, reopenAfter)
	}
}

// TestSettingsLost tells a proxy that restarted and lost the client's
// settings (what TestProxyRestartConsumersRecover meets from the real
// proxy) from other failures, which wait for reopenAfter in a row.
func TestSettingsLost(t *testing.T) {
	status := func(code v2.Code, msg string) error { return &rmq.ErrRpcStatus{Code: int32(code), Message: msg} }
	for _, c := range []struct {
		name string
		err  error
		want bool
	}{
		{"receive without settings", status(v2.Code_INTERNAL_SERVER_ERROR,
			`Cannot invoke "apache.rocketmq.v2.Settings.getSubscription()" because "settings" is null`), true},
		{"heartbeat refused", status(v2.Code_UNRECOGNIZED_CLIENT_TYPE, "cannot find client settings for this client"), true},
		{"flattened", errors.New("CODE: UNRECOGNIZED_CLIENT_TYPE, MESSAGE: cannot find client settings for this client"), true},
		{"connection refused", errors.New(`rpc error: code = Unavailable desc = connection error: desc = "transport: Error while dialing: dial tcp 127.0.0.1:58081: connect: connection refused"`), false},
		{"other server error", status(v2.Code_INTERNAL_SERVER_ERROR, "broker busy"), false},
	} {
		require.Equal(t, c.want, settingsLost(c.err), c.name)
	}
}
