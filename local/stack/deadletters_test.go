package stack_test

import (
	"log/slog"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/adapter/dlq"
	"github.com/aivedio/pipeline/adapter/mq"
	"github.com/aivedio/pipeline/adapter/mq/memmq"
	"github.com/aivedio/pipeline/local/stack"
	"github.com/aivedio/pipeline/shared/catalog"
	"github.com/aivedio/pipeline/shared/dbtest"
)

// TestTheEmulatorsDeadLettersAreQuarantined: a message of go run ./local
// that used up its group's delivery attempts lands on the emulator's
// dead-letter topic, and the drain the stack runs for every stage group
// moves it into message_quarantine, as `adapter dlq drain` does in a
// deployment: quarantine list and replay see it.
func TestTheEmulatorsDeadLettersAreQuarantined(t *testing.T) {
	t.Parallel()
	pool := dbtest.TestSchema(t)
	e := stack.NewEmulator()
	e.Await = 50 * time.Millisecond
	g := catalog.GroupSettle
	e.CreateGroup(memmq.GroupConfig{Name: g.BrokerName(), MaxDeliveryAttempts: 1})
	consumers, err := e.Consumers(g)
	require.NoError(t, err)
	require.Len(t, consumers, 1)
	marker := uuid.NewString()
	_, err = e.Producer().Send(t.Context(), &mq.Message{Topic: catalog.BillingSettle.BrokerName(), Tag: catalog.EventSettleRequested, Body: []byte(`{"settle":"` + marker + `"}`)})
	require.NoError(t, err)

	d := dlq.New(dlq.Params{Group: g, ConsumerFunc: e.DeadLetters(g), DB: pool, Logger: slog.New(slog.DiscardHandler),
		Metrics: dlq.NewMetrics(prometheus.NewRegistry())})
	t.Cleanup(func() { _ = d.Close() })
	n, err := d.DrainOnce(t.Context())
	require.NoError(t, err, "no dead letter yet: the drain waits for the topic")
	require.Zero(t, n)

	got, err := consumers[0].Receive(t.Context(), 1, 10*time.Second)
	require.NoError(t, err)
	require.Len(t, got, 1, "the one delivery attempt")
	require.NoError(t, consumers[0].ChangeInvisibleDuration(t.Context(), got[0], 100*time.Millisecond), "handed back, as after a failed delivery")
	require.Eventually(t, func() bool {
		// The next look of the group moves the spent message to its
		// dead-letter topic (lazily, as the proxy does).
		again, err := consumers[0].Receive(t.Context(), 1, 10*time.Second)
		require.NoError(t, err)
		require.Empty(t, again, "spent: never delivered again")
		n, err := d.DrainOnce(t.Context())
		return err == nil && n == 1
	}, 10*time.Second, 50*time.Millisecond)

	var consumer, source, body string
	require.NoError(t, pool.QueryRow(t.Context(), `SELECT consumer_name, source, convert_from(body, 'UTF8') FROM message_quarantine`).Scan(&consumer, &source, &body))
	require.Equal(t, g.Name, consumer)
	require.Equal(t, "DLQ", source)
	require.JSONEq(t, `{"settle":"`+marker+`"}`, body, "the dead letter whole")
}
