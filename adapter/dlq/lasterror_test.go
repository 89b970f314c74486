package dlq_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/adapter/mq"
	"github.com/aivedio/pipeline/adapter/source"
	"github.com/aivedio/pipeline/shared/delivery"
	"github.com/aivedio/pipeline/shared/outcome"
	"github.com/aivedio/pipeline/shared/quarantine"
)

// TestDeadLetterSaysWhatTheHandlerSaid: the source adapter records each
// failed delivery before handing the message back, so when the broker
// gives up and the drain quarantines the dead letter, the row carries the
// handler's own last error and its category, not only "attempts ran out".
func TestDeadLetterSaysWhatTheHandlerSaid(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	tb := setup(t)
	ev := validEvent(t)
	sendEvent(ctx, t, tb.producer, testTopic.BrokerName(), "test.tag", ev)

	failing := delivery.Func(func(context.Context, event.Event) (*event.Event, error) {
		return nil, outcome.Retryable("provider.unavailable", errors.New("the provider answered 503 twice"))
	})
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- source.New(source.Params{Group: testGroup, Consumers: []mq.Consumer{tb.stage}, Deliverer: failing, Quarantine: tb.pool,
			Workers: 1, Invisible: time.Second, HandlerTimeout: 500 * time.Millisecond,
			RetryDelay: func(int) time.Duration { return time.Millisecond }}).Run(runCtx)
	}()
	d := tb.drainer(t)
	require.Eventually(t, func() bool {
		n, err := d.DrainOnce(ctx)
		return err == nil && n == 1
	}, 10*time.Second, 20*time.Millisecond, "the broker gives up after two deliveries and the drain takes the dead letter")
	stop()
	require.NoError(t, <-done)

	msgs, err := quarantine.List(ctx, tb.pool, quarantine.Filter{})
	require.NoError(t, err)
	require.Len(t, msgs, 1)
	m := msgs[0]
	require.Equal(t, "dlq", m.ErrorClass)
	require.Equal(t, "max_delivery_attempts", m.ErrorCode)
	require.Equal(t, "provider.unavailable", m.LastErrorCode)
	require.Contains(t, m.LastError, "answered 503")
	require.Equal(t, quarantine.Dependency, m.Category)
	require.Equal(t, testGroup.MaxDeliveryAttempts, m.DeliveryCount)
	require.Equal(t, ev.ID(), m.EventID)
	require.Equal(t, ev.ID(), m.MessageKey, "the relay's key is the event id")
	require.True(t, m.FirstFailedAt.Before(m.LastFailedAt), "failing since the first delivery")
	var left int
	require.NoError(t, tb.pool.QueryRow(ctx, `SELECT count(*) FROM delivery_failures`).Scan(&left))
	require.Zero(t, left, "the failure record went into the row")
}
