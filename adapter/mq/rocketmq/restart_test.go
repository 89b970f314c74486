//go:build !race

package rocketmq_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os/exec"
	"regexp"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/adapter/mq"
	"github.com/aivedio/pipeline/adapter/mq/rocketmq"
	"github.com/aivedio/pipeline/adapter/mq/rocketmqtest"
	"github.com/aivedio/pipeline/shared/catalog"
)

// maxDeaf is how long after the proxy answers again (its port open, its
// broker registered with the name server: services.sh restart-proxy
// returns then) every consumer must receive again: a broker restart costs
// seconds, not the client's 5-minute settings sync.
const maxDeaf = 5 * time.Second

// TestProxyRestartConsumersRecover restarts the RocketMQ proxy under
// consumers of several groups, each long-polling as a source adapter does:
// once the proxy answers, each receives again within maxDeaf, and a message
// sent after the restart reaches every group.
//
// It stops the broker every other test uses, so it is not a TestRealBroker*
// test: `make test` runs it alone (local/services/test.sh).
func TestProxyRestartConsumersRecover(t *testing.T) {
	cfg := rocketmqtest.Config(t)
	topic := catalog.Topic{Name: rocketmqtest.UniqueName("restart"), Type: catalog.Normal}
	topic.Logical = topic.Name
	const groups = 4
	var gs []catalog.Group
	for i := range groups {
		gs = append(gs, catalog.Group{Name: fmt.Sprintf("%s_g%d", topic.Name, i), Stage: "restart", MaxDeliveryAttempts: 16})
	}
	rocketmqtest.Apply(t, cfg, []catalog.Topic{topic}, gs)

	var logs syncBuffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	t.Cleanup(func() { t.Logf("consumer log:\n%s", logs.String()) })

	// restartedAt is set once the proxy answers again; each consumer then
	// gets the message sent after it. A consumer's deaf time ends when it
	// sent its first receive that worked: its own "receiving again" line
	// says when (listening_since).
	var (
		mu          sync.Mutex
		restartedAt time.Time
		got         = map[string]bool{}
	)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	for _, g := range gs {
		c, err := rocketmq.NewConsumer(cfg, rocketmq.ConsumerParams{Group: g.BrokerName(),
			Filters: map[string]string{topic.BrokerName(): "*"}, Await: realAwait, Logger: log})
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Close() })
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				msgs, err := c.Receive(ctx, 16, 20*time.Second)
				mu.Lock()
				for _, m := range msgs {
					if string(m.Body) == "after restart" {
						got[g.Name] = true
					}
					_ = c.Ack(ctx, m)
				}
				mu.Unlock()
				if err != nil && ctx.Err() == nil {
					time.Sleep(time.Second) // as the source adapter pauses after a failed receive
				}
			}
		}()
	}

	// The relay's producer lives across the restart too.
	producer, err := rocketmq.NewProducer(cfg, topic.BrokerName())
	require.NoError(t, err)
	t.Cleanup(func() { _ = producer.Close() })

	out, err := exec.Command("../../../local/services/services.sh", "restart-proxy").CombinedOutput()
	require.NoError(t, err, "restart the proxy: %s", out)
	mu.Lock()
	restartedAt = time.Now()
	mu.Unlock()
	t.Logf("proxy answering again at %s", restartedAt.Format(time.RFC3339Nano))

	var sendErr error
	require.Eventually(t, func() bool {
		_, sendErr = producer.Send(ctx, &mq.Message{Topic: topic.BrokerName(), Body: []byte("after restart")})
		return sendErr == nil
	}, time.Minute, 100*time.Millisecond, "the producer sends again: %v", sendErr)
	sent := time.Since(restartedAt)
	t.Logf("producer sent again %s after the proxy answered", sent.Round(time.Millisecond))

	// Bounded well past maxDeaf, so a slow recovery is measured, not cut.
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(got) == groups
	}, 3*time.Minute, 100*time.Millisecond, "every group gets the message sent after the restart")
	mu.Lock()
	defer mu.Unlock()
	recovered := listeningAgain(t, logs.String(), restartedAt)
	for _, g := range gs {
		_, ok := recovered[g.Name]
		require.True(t, ok, "%s logged no recovery", g.Name)
		t.Logf("%s deaf for %s after the proxy answered", g.Name, recovered[g.Name].Round(time.Millisecond))
	}
	require.Less(t, sent, maxDeaf, "the producer sends again within %s of the proxy answering", maxDeaf)
	for _, g := range gs {
		require.Less(t, recovered[g.Name], maxDeaf, "%s receives again within %s of the proxy answering", g.Name, maxDeaf)
	}
}

// syncBuffer is a bytes.Buffer safe for the consumers' concurrent log lines.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// listening is a "rocketmq consumer receiving again" line's group and
// listening_since.
var listening = regexp.MustCompile(`msg="rocketmq consumer receiving again" consumer_group=(\S+) .*listening_since=(\S+)`)

// listeningAgain is, per group, how long after since its consumer sent the
// first receive that worked, from the consumers' log.
func listeningAgain(t *testing.T, log string, since time.Time) map[string]time.Duration {
	t.Helper()
	out := map[string]time.Duration{}
	for _, m := range listening.FindAllStringSubmatch(log, -1) {
		at, err := time.Parse(time.RFC3339Nano, m[2])
		require.NoError(t, err, "listening_since %q", m[2])
		if _, seen := out[m[1]]; !seen {
			out[m[1]] = max(at.Sub(since), 0)
		}
	}
	return out
}
