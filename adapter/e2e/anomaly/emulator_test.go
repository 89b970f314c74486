package anomaly_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/adapter/dlq"
	"github.com/aivedio/pipeline/adapter/mq"
	"github.com/aivedio/pipeline/adapter/mq/memmq"
	"github.com/aivedio/pipeline/shared/catalog"
)

// emulatorInvisible is the invisible duration sources use on the emulator:
// far below the proxy's 10 s minimum, so that redeliveries come quickly.
const emulatorInvisible = 2 * time.Second

// newEmulator gives a test a kernel on its own broker emulator, with the
// group cg.anomaly.<name>.v1 reading billing.settle and giving up after
// maxAttempts deliveries.
func newEmulator(t *testing.T, name string, maxAttempts int) *kernel {
	t.Helper()
	b := memmq.New(&memmq.Opts{MinInvisible: time.Millisecond})
	group := catalog.Group{Name: "cg.anomaly." + name + ".v1", Stage: "anomaly", MaxDeliveryAttempts: maxAttempts,
		Subscriptions: []catalog.Subscription{{Topic: catalog.BillingSettle}}}
	b.Apply(catalog.Topics(), []catalog.Group{group, catalog.DLQDrain})
	const await = 50 * time.Millisecond
	return &kernel{
		pool:     pool(t),
		run:      "run-" + name,
		topic:    catalog.BillingSettle,
		group:    group,
		producer: b.Producer(),
		consumer: func(t *testing.T) (mq.Consumer, func()) {
			t.Helper()
			c, err := b.Consumer(group.BrokerName(), map[string]string{catalog.BillingSettle.BrokerName(): "*"}, await)
			require.NoError(t, err)
			return c, closer(t, c)
		},
		// The dead-letter topic appears with the first dead letter.
		dlq: func(context.Context) (mq.Consumer, error) {
			c, err := b.Consumer(catalog.DLQDrain.BrokerName(), map[string]string{group.DLQTopic(): "*"}, await)
			switch {
			case errors.Is(err, memmq.ErrUnknownTopic):
				return nil, fmt.Errorf("%w: %w", dlq.ErrNoTopic, err)
			case err != nil:
				return nil, err
			}
			return c, nil
		},
		invisible: emulatorInvisible,
		lag:       100 * time.Millisecond,
	}
}
