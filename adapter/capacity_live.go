package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	promapi "github.com/prometheus/client_golang/api"
	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"

	"github.com/aivedio/pipeline/shared/capacity"
	"github.com/aivedio/pipeline/shared/catalog"
)

// liveParams are the flags of `capacity live`.
type liveParams struct {
	Prometheus  string
	Window      time.Duration
	Workers     int
	Utilization float64
}

// liveReport is what `capacity live` measured and concluded; its JSON is
// the --json output.
type liveReport struct {
	Window            string        `json:"window"`
	GenerationsPerSec float64       `json:"generations_per_second"`
	RendersPerSec     float64       `json:"renders_per_second"`
	MessagesPerSec    float64       `json:"messages_per_second"`
	FanoutPerGen      *float64      `json:"messages_per_generation"`
	FanoutPerRender   *float64      `json:"render_messages_per_render"`
	Stages            []liveStage   `json:"stages"`
	FirstToSaturate   string        `json:"first_to_saturate,omitempty"`
	SaturatesAtPerSec float64       `json:"saturates_at_requests_per_second,omitempty"`
	Backlogs          []liveBacklog `json:"backlogs"`
	NotMeasured       []string      `json:"not_measured,omitempty"`
	saturation        *capacity.Saturation
	requestsPerSecond float64
}

type liveStage struct {
	Stage          string   `json:"stage"`
	ArrivalPerSec  float64  `json:"arrival_per_second"`
	ServiceSeconds float64  `json:"service_seconds"`
	Instances      int      `json:"instances"`
	Workers        int      `json:"workers"`
	CapacityPerSec float64  `json:"capacity_per_second"`
	PerRequest     float64  `json:"deliveries_per_request"`
	SaturatesAt    *float64 `json:"saturates_at_requests_per_second"`
}

type liveBacklog struct {
	Group         string   `json:"consumer_group"`
	Messages      float64  `json:"messages"`
	ConsumePerSec float64  `json:"consume_per_second"`
	ArrivalPerSec float64  `json:"arrival_per_second"`
	DrainSeconds  *float64 `json:"drain_seconds"`
	NeverDrains   bool     `json:"never_drains,omitempty"`
}

// measureLive asks Prometheus for the window's arrival rates, fan-out,
// per-stage load and the broker's backlog, and works out which stage
// saturates first and how long the backlog takes to drain.
func measureLive(ctx context.Context, p liveParams) (liveReport, error) {
	if p.Prometheus == "" {
		return liveReport{}, errors.New("--prometheus URL is required (the Prometheus that scrapes the pipeline and the broker)")
	}
	if p.Window < time.Minute {
		return liveReport{}, fmt.Errorf("--window %s is too short to measure rates: use at least 1m", p.Window)
	}
	client, err := promapi.NewClient(promapi.Config{Address: p.Prometheus})
	if err != nil {
		return liveReport{}, fmt.Errorf("prometheus %s: %w", p.Prometheus, err)
	}
	q := querier{api: promv1.NewAPI(client), at: time.Now(), window: model.Duration(p.Window).String()}
	rep := liveReport{Window: q.window, Backlogs: []liveBacklog{}}

	if rep.GenerationsPerSec, err = q.scalar(ctx, `sum(rate(api_request_duration_seconds_count{route="POST /v1/generations",code="202"}[$w]))`); err != nil {
		return liveReport{}, err
	}
	if rep.RendersPerSec, err = q.scalar(ctx, `sum(rate(api_request_duration_seconds_count{route="POST /v1/renders",code="202"}[$w]))`); err != nil {
		return liveReport{}, err
	}
	if rep.MessagesPerSec, err = q.scalar(ctx, `sum(rate(aivedio_relay_published_total[$w]))`); err != nil {
		return liveReport{}, err
	}
	renderMessages, err := q.scalar(ctx, fmt.Sprintf(`sum(rate(aivedio_relay_published_total{topic=%q}[$w]))`, catalog.RenderExport.Name))
	if err != nil {
		return liveReport{}, err
	}
	if rep.GenerationsPerSec > 0 {
		v := (rep.MessagesPerSec - renderMessages) / rep.GenerationsPerSec
		rep.FanoutPerGen = &v
	} else {
		rep.NotMeasured = append(rep.NotMeasured, "messages per generation: no generation was created in the window")
	}
	if rep.RendersPerSec > 0 {
		v := renderMessages / rep.RendersPerSec
		rep.FanoutPerRender = &v
	} else {
		rep.NotMeasured = append(rep.NotMeasured, "render messages per render: no render was requested in the window")
	}

	arrivals, err := q.byLabel(ctx, `sum by (stage) (rate(aivedio_stage_work_duration_seconds_count[$w]))`, "stage")
	if err != nil {
		return liveReport{}, err
	}
	busy, err := q.byLabel(ctx, `sum by (stage) (rate(aivedio_stage_work_duration_seconds_sum[$w]))`, "stage")
	if err != nil {
		return liveReport{}, err
	}
	instances, err := q.byLabel(ctx, `count by (stage) (count by (stage, instance) (aivedio_stage_work_duration_seconds_count))`, "stage")
	if err != nil {
		return liveReport{}, err
	}
	var loads []capacity.StageLoad
	for _, stage := range catalog.Stages() {
		l := capacity.StageLoad{Stage: stage, Arrival: arrivals[stage], Instances: int(instances[stage]), Workers: p.Workers}
		if l.Arrival > 0 {
			l.ServiceTime = time.Duration(busy[stage] / l.Arrival * float64(time.Second))
			if l.ServiceTime <= 0 {
				l.ServiceTime = time.Microsecond // faster than the histogram can tell
			}
		}
		loads = append(loads, l)
	}
	requests := rep.GenerationsPerSec + rep.RendersPerSec
	sat, err := capacity.Saturate(requests, p.Utilization, loads)
	switch {
	case errors.Is(err, capacity.ErrNoRequests):
		rep.NotMeasured = append(rep.NotMeasured, "stage saturation: "+err.Error())
	case err != nil:
		return liveReport{}, err
	default:
		rep.saturation, rep.requestsPerSecond = &sat, requests
		for _, s := range sat.Stages {
			ls := liveStage{Stage: s.Stage, ArrivalPerSec: s.Arrival, ServiceSeconds: s.ServiceTime.Seconds(), Instances: s.Instances,
				Workers: s.Workers, CapacityPerSec: s.Capacity, PerRequest: s.PerRequest}
			if !math.IsInf(s.SaturatesAt, 1) {
				at := s.SaturatesAt
				ls.SaturatesAt = &at
			}
			rep.Stages = append(rep.Stages, ls)
		}
		if first := sat.Stages[0]; !math.IsInf(first.SaturatesAt, 1) {
			rep.FirstToSaturate, rep.SaturatesAtPerSec = first.Stage, first.SaturatesAt
		}
	}

	lag, err := q.byLabel(ctx, `sum by (consumer_group) (rocketmq_consumer_lag_messages{is_system="false"})`, "consumer_group")
	if err != nil {
		return liveReport{}, err
	}
	consumed, err := q.byLabel(ctx, `sum by (consumer_group) (rate(rocketmq_messages_out_total[$w]))`, "consumer_group")
	if err != nil {
		return liveReport{}, err
	}
	produced, err := q.byLabel(ctx, `sum by (topic) (rate(rocketmq_messages_in_total[$w]))`, "topic")
	if err != nil {
		return liveReport{}, err
	}
	if len(lag) == 0 {
		rep.NotMeasured = append(rep.NotMeasured, "backlog: no rocketmq_consumer_lag_messages (is the broker's exporter scraped?)")
	}
	for _, g := range catalog.Groups() {
		backlog := lag[g.BrokerName()]
		if backlog <= 0 {
			continue
		}
		b := liveBacklog{Group: g.Name, Messages: backlog, ConsumePerSec: consumed[g.BrokerName()]}
		for _, sub := range g.Subscriptions {
			b.ArrivalPerSec += produced[sub.Topic.BrokerName()]
		}
		d, err := capacity.DrainTime(b.Messages, b.ConsumePerSec, b.ArrivalPerSec)
		if errors.Is(err, capacity.ErrNeverDrains) {
			b.NeverDrains = true
		} else if err != nil {
			return liveReport{}, fmt.Errorf("drain of %s: %w", g.Name, err)
		} else {
			s := d.Seconds()
			b.DrainSeconds = &s
		}
		rep.Backlogs = append(rep.Backlogs, b)
	}
	slices.SortFunc(rep.Backlogs, func(a, b liveBacklog) int { return strings.Compare(a.Group, b.Group) })
	return rep, nil
}

// text is the report for a person.
func (rep liveReport) text() string {
	var b strings.Builder
	fmt.Fprintf(&b, "measured over %s\n", rep.Window)
	fmt.Fprintf(&b, "arrivals: %s generations/s, %s renders/s; broker %s msg/s\n",
		rate(rep.GenerationsPerSec), rate(rep.RendersPerSec), rate(rep.MessagesPerSec))
	if rep.FanoutPerGen != nil {
		fmt.Fprintf(&b, "fan-out: %s messages per generation (the settle and notify of renders included)\n", num(*rep.FanoutPerGen))
	}
	if rep.FanoutPerRender != nil {
		fmt.Fprintf(&b, "fan-out: %s render.export messages per render\n", num(*rep.FanoutPerRender))
	}
	if rep.saturation != nil {
		tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "stage\tarrival/s\tservice\tinstances × workers\tcapacity/s\tper request\tsaturates at requests/s")
		for _, s := range rep.Stages {
			at := "never (no traffic)"
			if s.SaturatesAt != nil {
				at = rate(*s.SaturatesAt)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d × %d\t%s\t%s\t%s\n", s.Stage, rate(s.ArrivalPerSec),
				time.Duration(s.ServiceSeconds*float64(time.Second)).Round(time.Millisecond), s.Instances, s.Workers,
				rate(s.CapacityPerSec), rate(s.PerRequest), at)
		}
		_ = tw.Flush()
		if rep.FirstToSaturate != "" {
			fmt.Fprintf(&b, "first to saturate: %s at %s requests/s (now %s: %s× headroom)\n", rep.FirstToSaturate,
				rate(rep.SaturatesAtPerSec), rate(rep.requestsPerSecond), num(rep.SaturatesAtPerSec/rep.requestsPerSecond))
		}
	}
	if len(rep.Backlogs) == 0 {
		b.WriteString("backlog: none\n")
	}
	for _, bl := range rep.Backlogs {
		if bl.NeverDrains {
			fmt.Fprintf(&b, "backlog: %s has %s messages and never drains: consuming %s/s does not exceed %s/s arriving\n",
				bl.Group, num(bl.Messages), rate(bl.ConsumePerSec), rate(bl.ArrivalPerSec))
			continue
		}
		fmt.Fprintf(&b, "backlog: %s has %s messages, drained in %s s (%.1f min) at %s/s consumed, %s/s arriving\n",
			bl.Group, num(bl.Messages), num(*bl.DrainSeconds), *bl.DrainSeconds/60, rate(bl.ConsumePerSec), rate(bl.ArrivalPerSec))
	}
	for _, n := range rep.NotMeasured {
		fmt.Fprintf(&b, "not measured: %s\n", n)
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// rate prints a rate with up to three significant decimals: live rates
// are often well under one per second.
func rate(v float64) string {
	if v >= 100 || v == 0 {
		return num(v)
	}
	return strings.TrimRight(strings.TrimRight(fmt.Sprintf("%.3f", v), "0"), ".")
}

// querier runs instant queries at one moment, with $w the window.
type querier struct {
	api    promv1.API
	at     time.Time
	window string
}

func (q querier) vector(ctx context.Context, query string) (model.Vector, error) {
	query = strings.ReplaceAll(query, "$w", q.window)
	v, _, _, err := q.api.Query(ctx, query, q.at)
	if err != nil {
		return nil, fmt.Errorf("query %s: %w", query, err)
	}
	vec, ok := v.(model.Vector)
	if !ok {
		return nil, fmt.Errorf("query %s: got a %s, not a vector", query, v.Type())
	}
	return vec, nil
}

// scalar is the query's one value; 0 when it returns nothing (no series).
func (q querier) scalar(ctx context.Context, query string) (float64, error) {
	vec, err := q.vector(ctx, query)
	if err != nil || len(vec) == 0 {
		return 0, err
	}
	return finite(float64(vec[0].Value)), nil
}

// byLabel is the query's values by one label.
func (q querier) byLabel(ctx context.Context, query, label string) (map[string]float64, error) {
	vec, err := q.vector(ctx, query)
	if err != nil {
		return nil, err
	}
	out := make(map[string]float64, len(vec))
	for _, s := range vec {
		out[string(s.Metric[model.LabelName(label)])] = finite(float64(s.Value))
	}
	return out, nil
}

// finite maps NaN (a rate over no samples) to 0.
func finite(v float64) float64 {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return 0
	}
	return v
}
