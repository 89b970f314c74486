//go:build !race

package rocketmq_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/textparse"
	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/adapter/mq"
	"github.com/aivedio/pipeline/adapter/mq/rocketmq"
	"github.com/aivedio/pipeline/adapter/mq/rocketmqtest"
	"github.com/aivedio/pipeline/shared/catalog"
	"github.com/aivedio/pipeline/shared/servicetest"
)

// TestRealBrokerMetrics reads the broker's own exporter after the events
// that should move it: messages published and not yet received are lag
// (in messages, with the age of the oldest) and ready; received and
// acknowledged, the lag is gone and the group's consumed count grew. (A
// simple consumer's receive is a pop, which moves the group's offset at
// once: the broker's in-flight gauge stays 0 for it, and the adapter's
// own aivedio_adapter_in_flight is the one to watch.) The storage series (size, retention
// window) and the broker's permission are there, and every series the
// shipped rules use (rocketmq.BrokerSeries) is exported with its labels.
func TestRealBrokerMetrics(t *testing.T) {
	t.Parallel()
	cfg := rocketmqtest.Config(t)
	metricsURL := servicetest.Env(t, "the broker's Prometheus exporter", "ROCKETMQ_METRICS_URL")
	topic := catalog.Topic{Name: rocketmqtest.UniqueName("t_metrics"), Logical: "metrics", Type: catalog.Normal}
	group := catalog.Group{Name: rocketmqtest.UniqueName("g_metrics"), Stage: "test", MaxDeliveryAttempts: 4}
	rocketmqtest.Apply(t, cfg, []catalog.Topic{topic}, []catalog.Group{group})
	producer, err := rocketmq.NewProducer(cfg, topic.Name)
	require.NoError(t, err)
	t.Cleanup(func() { _ = producer.Close() })
	consumer, err := rocketmq.NewConsumer(cfg, rocketmq.ConsumerParams{Group: group.Name, Filters: map[string]string{topic.Name: "*"}, Await: realAwait})
	require.NoError(t, err)
	t.Cleanup(func() { _ = consumer.Close() })

	// One receive first: a group's offsets start at its first pop, and
	// before that the broker counts no lag for it.
	early, err := consumer.Receive(t.Context(), 1, 30*time.Second)
	require.NoError(t, err)
	require.Empty(t, early)

	const n = 5
	for i := range n {
		_, err := producer.Send(t.Context(), &mq.Message{Topic: topic.Name, Tag: "m", Body: fmt.Appendf(nil, `{"n":%d}`, i)})
		require.NoError(t, err)
	}
	ours := map[string]string{"topic": topic.Name, "consumer_group": group.Name, "is_retry": "false"}
	t.Cleanup(func() {
		if t.Failed() {
			for name, samples := range scrape(t, metricsURL) {
				for _, s := range samples {
					if s["topic"] == topic.Name || s["consumer_group"] == group.Name {
						t.Logf("%s %v", name, s)
					}
				}
			}
		}
	})
	require.Eventually(t, func() bool {
		m := scrape(t, metricsURL)
		return value(m, "rocketmq_messages_in_total", map[string]string{"topic": topic.Name}) >= n &&
			value(m, "rocketmq_consumer_lag_messages", ours) >= n &&
			value(m, "rocketmq_consumer_ready_messages", ours) >= n &&
			value(m, "rocketmq_consumer_lag_latency_milliseconds", ours) > 0
	}, time.Minute, time.Second, "the broker reports %d messages of %s waiting for %s", n, topic.Name, group.Name)

	var got []*mq.Received
	require.Eventually(t, func() bool {
		batch, err := consumer.Receive(t.Context(), n, 30*time.Second)
		require.NoError(t, err)
		got = append(got, batch...)
		return len(got) >= n
	}, time.Minute, 10*time.Millisecond)
	for _, msg := range got {
		require.NoError(t, consumer.Ack(t.Context(), msg))
	}
	require.Eventually(t, func() bool {
		m := scrape(t, metricsURL)
		return value(m, "rocketmq_consumer_lag_messages", ours) == 0 &&
			value(m, "rocketmq_messages_out_total", map[string]string{"topic": topic.Name, "consumer_group": group.Name}) >= n
	}, time.Minute, time.Second, "acknowledged: no lag, consumed")

	m := scrape(t, metricsURL)
	require.Positive(t, value(m, "rocketmq_storage_size_bytes", nil))
	require.Positive(t, value(m, "rocketmq_storage_message_reserve_time_milliseconds", nil), "the retention window: the oldest stored message's age")
	require.Equal(t, 6.0, value(m, "rocketmq_broker_permission", nil), "the broker takes reads and writes (PERM_READ|PERM_WRITE)")
	for name, labels := range rocketmq.BrokerSeries {
		samples := m[name]
		require.NotEmpty(t, samples, "the broker exports %s", name)
		for _, l := range labels {
			require.Contains(t, samples[0], l, "%s has label %s", name, l)
		}
	}
}

// scrape reads the exporter's samples by name, each as its label map
// (with "__value__" holding the value), in OpenMetrics with Prometheus's
// own parser, as a Prometheus server scrapes it: the exporter's classic
// text output has TYPE lines (info, and family names without the unit
// suffix of their samples) that stricter text parsers refuse.
func scrape(t *testing.T, url string) map[string][]map[string]string {
	t.Helper()
	req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, url, nil)
	require.NoError(t, err)
	req.Header.Set("Accept", "application/openmetrics-text; version=1.0.0")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	p := textparse.NewOpenMetricsParser(body, labels.NewSymbolTable())
	out := map[string][]map[string]string{}
	for {
		entry, err := p.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		require.NoError(t, err)
		if entry != textparse.EntrySeries {
			continue
		}
		_, _, v := p.Series()
		var ls labels.Labels
		p.Labels(&ls)
		sample := ls.Map()
		sample["__value__"] = fmt.Sprint(v)
		name := sample[model.MetricNameLabel]
		out[name] = append(out[name], sample)
	}
}

// value is the largest value among name's samples that carry every label
// of match; -1 when none does.
func value(m map[string][]map[string]string, name string, match map[string]string) float64 {
	best := -1.0
	for _, s := range m[name] {
		if !hasLabels(s, match) {
			continue
		}
		var v float64
		_, _ = fmt.Sscan(s["__value__"], &v)
		best = max(best, v)
	}
	return best
}

func hasLabels(sample, match map[string]string) bool {
	for k, v := range match {
		if sample[k] != v {
			return false
		}
	}
	return true
}
