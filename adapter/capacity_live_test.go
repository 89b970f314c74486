package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/shared/catalog"
)

// promFake answers Prometheus's instant-query API with fixed vectors, by
// the query's distinctive part, and records the queries it was asked.
type promFake struct {
	mu      sync.Mutex
	queries []string
	answers []promAnswer
}

type promAnswer struct {
	contains string
	samples  []promSample
}

type promSample struct {
	labels map[string]string
	value  float64
}

func (f *promFake) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	query := r.FormValue("query")
	f.mu.Lock()
	f.queries = append(f.queries, query)
	f.mu.Unlock()
	result := []map[string]any{}
	for _, a := range f.answers {
		if strings.Contains(query, a.contains) {
			for _, s := range a.samples {
				result = append(result, map[string]any{"metric": s.labels, "value": []any{1.8e9, fmt.Sprint(s.value)}})
			}
			break
		}
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"status": "success", "data": map[string]any{"resultType": "vector", "result": result}})
}

func one(v float64) []promSample { return []promSample{{labels: map[string]string{}, value: v}} }

func by(label string, values map[string]float64) []promSample {
	var out []promSample
	for k, v := range values {
		out = append(out, promSample{labels: map[string]string{label: k}, value: v})
	}
	return out
}

// TestCapacityLive: from what Prometheus measured, `capacity live` gives
// the fan-out per generation and per render, each stage's capacity and
// the request rate at which it saturates (transcode first: twice per
// request, 20 s each, on 3 × 16 workers at 0.7: 1.68/s, so 0.84
// requests/s), and the drain time of each group's backlog, refusing one
// that cannot drain.
func TestCapacityLive(t *testing.T) {
	t.Parallel()
	transcode, render := catalog.GroupTranscode, catalog.GroupRender
	fake := &promFake{answers: []promAnswer{
		{`route="POST /v1/generations"`, one(0.5)},
		{`route="POST /v1/renders"`, one(0.1)},
		{`aivedio_relay_published_total{topic=`, one(0.6)},
		{`aivedio_relay_published_total[`, one(10)},
		{`rate(aivedio_stage_work_duration_seconds_count`, by("stage", map[string]float64{"submit": 0.6, "transcode": 1.2})},
		{`rate(aivedio_stage_work_duration_seconds_sum`, by("stage", map[string]float64{"submit": 0.6, "transcode": 24})},
		{`count by (stage)`, by("stage", map[string]float64{"submit": 1, "transcode": 3})},
		{`rocketmq_consumer_lag_messages`, by("consumer_group", map[string]float64{transcode.BrokerName(): 1000, render.BrokerName(): 50})},
		{`rocketmq_messages_out_total`, by("consumer_group", map[string]float64{transcode.BrokerName(): 3, render.BrokerName(): 0.1})},
		{`rocketmq_messages_in_total`, by("topic", map[string]float64{
			transcode.Subscriptions[0].Topic.BrokerName(): 1, render.Subscriptions[0].Topic.BrokerName(): 0.2})},
	}}
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)

	var out bytes.Buffer
	require.NoError(t, runCapacity([]string{"live", "--prometheus", srv.URL, "--window", "30m"}, &out))
	text := out.String()
	t.Log("\n" + text)
	for _, want := range []string{
		"measured over 30m",
		"arrivals: 0.5 generations/s, 0.1 renders/s; broker 10 msg/s",
		"fan-out: 18.8 messages per generation",
		"fan-out: 6 render.export messages per render",
		"first to saturate: transcode at 0.84 requests/s (now 0.6: 1.4× headroom)",
		"backlog: " + transcode.Name + " has 1,000 messages, drained in 500 s (8.3 min) at 3/s consumed, 1/s arriving",
		"backlog: " + render.Name + " has 50 messages and never drains",
	} {
		require.Contains(t, text, want)
	}
	for _, q := range fake.queries {
		require.NotContains(t, q, "$w", "the window is filled in")
	}

	out.Reset()
	require.NoError(t, runCapacity([]string{"live", "--prometheus", srv.URL, "--json"}, &out))
	var rep struct {
		FirstToSaturate string  `json:"first_to_saturate"`
		SaturatesAt     float64 `json:"saturates_at_requests_per_second"`
		PerGen          float64 `json:"messages_per_generation"`
		Stages          []struct {
			Stage    string  `json:"stage"`
			Capacity float64 `json:"capacity_per_second"`
		} `json:"stages"`
		Backlogs []struct {
			Group        string   `json:"consumer_group"`
			DrainSeconds *float64 `json:"drain_seconds"`
			NeverDrains  bool     `json:"never_drains"`
		} `json:"backlogs"`
	}
	require.NoError(t, json.Unmarshal(out.Bytes(), &rep))
	require.Equal(t, "transcode", rep.FirstToSaturate)
	require.InDelta(t, 0.84, rep.SaturatesAt, 1e-9)
	require.InDelta(t, 18.8, rep.PerGen, 1e-9)
	require.Equal(t, "transcode", rep.Stages[0].Stage)
	require.InDelta(t, 1.68, rep.Stages[0].Capacity, 1e-9)
	require.Len(t, rep.Backlogs, 2)

	require.ErrorContains(t, runCapacity([]string{"live"}, &out), "--prometheus URL is required")
	require.ErrorContains(t, runCapacity([]string{"live", "--prometheus", srv.URL, "--window", "10s"}, &out), "too short")
}
