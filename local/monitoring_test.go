package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v2"

	"github.com/aivedio/pipeline/adapter/dlq"
	"github.com/aivedio/pipeline/adapter/mq/rocketmq"
	"github.com/aivedio/pipeline/adapter/relay"
	"github.com/aivedio/pipeline/adapter/source"
	"github.com/aivedio/pipeline/functions"
	"github.com/aivedio/pipeline/functions/api"
	"github.com/aivedio/pipeline/shared/billing"
	"github.com/aivedio/pipeline/shared/catalog"
	"github.com/aivedio/pipeline/shared/quarantine"
	"github.com/aivedio/pipeline/shared/replay"
	"github.com/aivedio/pipeline/shared/task"
	"github.com/aivedio/pipeline/shared/telemetry"
)

// The monitoring files that ship with the deploy files.
const (
	rulesFile          = "../knative/monitoring/rules.yaml"
	prometheusRuleFile = "../knative/monitoring/prometheusrule.yaml"
	dashboardFile      = "../knative/monitoring/dashboard.json"
	readmeFile         = "../docs/operations.md"
)

// TestMonitoring: the alert rules parse with Prometheus's own rule-file
// package, the PrometheusRule carries the same groups, every series and
// label the rules and the dashboard name is one the binaries register,
// and the metrics table of docs/operations.md lists exactly the registered series,
// showing each alert by name with its threshold.
func TestMonitoring(t *testing.T) {
	t.Parallel()
	series := registeredSeries(t)
	for name, labels := range rocketmq.BrokerSeries {
		series[name] = labels // the broker's own; TestRealBrokerMetrics checks it exports them
	}
	promql := parser.NewParser(parser.Options{})

	raw, err := os.ReadFile(rulesFile)
	require.NoError(t, err)
	groups, errs := rulefmt.Parse(raw, false, model.UTF8Validation, promql, slog.New(slog.DiscardHandler))
	require.Empty(t, errs, "%s does not parse as a Prometheus rule file", rulesFile)
	require.NotEmpty(t, groups.Groups)

	var prometheusRule struct {
		Kind string `yaml:"kind"`
		Spec struct {
			Groups any `yaml:"groups"`
		} `yaml:"spec"`
	}
	pr, err := os.ReadFile(prometheusRuleFile)
	require.NoError(t, err)
	require.NoError(t, yaml.Unmarshal(pr, &prometheusRule))
	var plain struct {
		Groups any `yaml:"groups"`
	}
	require.NoError(t, yaml.Unmarshal(raw, &plain))
	require.Equal(t, "PrometheusRule", prometheusRule.Kind)
	require.Equal(t, plain.Groups, prometheusRule.Spec.Groups, "%s carries exactly the groups of %s", prometheusRuleFile, rulesFile)

	table := readmeMetricsTable(t)
	var alerts []rulefmt.Rule
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			require.NotEmpty(t, r.Alert, "group %s: only alerting rules ship", g.Name)
			require.NotEmpty(t, r.Annotations["threshold"], "alert %s has no threshold annotation", r.Alert)
			require.NotEmpty(t, r.Annotations["summary"], "alert %s has no summary", r.Alert)
			require.Contains(t, []string{"page", "warn", "info"}, r.Labels["severity"], "alert %s's severity", r.Alert)
			expr, err := promql.ParseExpr(r.Expr)
			require.NoError(t, err, "alert %s", r.Alert)
			names := checkSelectors(t, "alert "+r.Alert, expr, series)
			require.Contains(t, r.Annotations["threshold"], thresholdOf(t, r.Alert, expr), "alert %s's threshold annotation names its number", r.Alert)
			row, ok := table[names[0]]
			require.True(t, ok, "alert %s's series %s has no row in the metrics table of docs/operations.md", r.Alert, names[0])
			require.Contains(t, row, "`"+r.Alert+"`: "+r.Annotations["threshold"], "the docs/operations.md row of %s shows alert %s with its threshold", names[0], r.Alert)
			alerts = append(alerts, r)
		}
	}

	var dashboard struct {
		Panels []struct {
			Title   string `json:"title"`
			Type    string `json:"type"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	dash, err := os.ReadFile(dashboardFile)
	require.NoError(t, err)
	dec := json.NewDecoder(bytes.NewReader(dash))
	require.NoError(t, dec.Decode(&dashboard))
	shown := map[string]bool{}
	for _, p := range dashboard.Panels {
		if p.Type == "row" {
			continue
		}
		require.NotEmpty(t, p.Targets, "panel %q has no query", p.Title)
		for _, target := range p.Targets {
			expr, err := promql.ParseExpr(target.Expr)
			require.NoError(t, err, "panel %q", p.Title)
			for _, name := range checkSelectors(t, fmt.Sprintf("panel %q", p.Title), expr, series) {
				shown[name] = true
			}
		}
	}

	var ours, listed, notShown []string
	for name := range series {
		if strings.HasPrefix(name, "aivedio_") || strings.HasPrefix(name, "api_") || strings.HasPrefix(name, "rocketmq_") {
			ours = append(ours, name)
			if !shown[name] {
				notShown = append(notShown, name)
			}
		}
	}
	for name := range table {
		listed = append(listed, name)
	}
	slices.Sort(ours)
	slices.Sort(listed)
	slices.Sort(notShown)
	require.Equal(t, ours, listed, "the metrics table of docs/operations.md lists exactly the series the binaries register and the broker series the rules use")
	require.Empty(t, notShown, "every series has a dashboard panel")
	t.Logf("%d alerts, %d panels, %d series", len(alerts), len(dashboard.Panels), len(ours))
}

// registeredSeries is every metric family the binaries register, with its
// labels: what the API, the relay, the source adapters, the DLQ drainers
// and the stage functions put in their registries.
func registeredSeries(t *testing.T) map[string][]string {
	t.Helper()
	pool, err := pgxpool.New(t.Context(), "postgres://describe@127.0.0.1:1/describe") // never connected: Describe only
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	t.Cleanup(func() { _ = rdb.Close() })

	// The lists the binaries build their registries from, not a copy.
	reg := telemetry.NewRegistry(slices.Concat(functions.StageCollectors(), functions.APICollectors())...)
	reg.MustRegister(task.StateGauges(pool), quarantine.Collector(pool, catalog.Groups()))
	relay.NewMetrics(reg)
	source.NewMetrics(reg)
	dlq.NewMetrics(reg)
	api.New(api.Options{Pool: pool, Redis: rdb, Replay: replay.NewDesk(pool, functions.ReplayRules(), nil),
		Models: []string{"minimax/video-01"}, Price: billing.DefaultPrice, Registerer: reg})

	descs := make(chan *prometheus.Desc, 1024)
	go func() { reg.Describe(descs); close(descs) }()
	out := map[string][]string{}
	for d := range descs {
		m := descPattern.FindStringSubmatch(d.String())
		require.NotNil(t, m, "unexpected Desc form %s", d)
		labels := []string{}
		if m[2] != "" {
			labels = strings.Split(m[2], ",")
		}
		out[m[1]] = labels
	}
	return out
}

var descPattern = regexp.MustCompile(`^Desc\{fqName: "([^"]+)", .*variableLabels: \{([^}]*)\}\}$`)

// checkSelectors fails unless every selector in expr names a registered
// series (a histogram's _bucket, _sum and _count of one) with labels it
// has, and every grouping label is one of them; it returns the series
// named, in order.
func checkSelectors(t *testing.T, where string, expr parser.Expr, series map[string][]string) []string {
	t.Helper()
	var names []string
	var labels []string
	parser.Inspect(expr, func(node parser.Node, _ []parser.Node) error {
		vs, ok := node.(*parser.VectorSelector)
		if !ok {
			return nil
		}
		name, known := seriesOf(vs.Name, series)
		require.True(t, known, "%s names %s, which no binary registers", where, vs.Name)
		names = append(names, name)
		have := series[name]
		if vs.Name != name && strings.HasSuffix(vs.Name, "_bucket") {
			have = append(slices.Clip(have), "le")
		}
		labels = append(labels, have...)
		for _, m := range vs.LabelMatchers {
			if m.Name != model.MetricNameLabel {
				require.Contains(t, have, m.Name, "%s matches label %q of %s, which has %v", where, m.Name, name, have)
			}
		}
		return nil
	})
	require.NotEmpty(t, names, "%s names no series", where)
	parser.Inspect(expr, func(node parser.Node, _ []parser.Node) error {
		if agg, ok := node.(*parser.AggregateExpr); ok {
			for _, l := range agg.Grouping {
				require.Contains(t, labels, l, "%s groups by %q, which none of %v has", where, l, names)
			}
		}
		return nil
	})
	return names
}

// seriesOf is the registered family a selector's name belongs to.
func seriesOf(name string, series map[string][]string) (string, bool) {
	if _, ok := series[name]; ok {
		return name, true
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suffix); ok {
			if _, ok := series[base]; ok {
				return base, true
			}
		}
	}
	return "", false
}

// thresholdOf is the number an alert's expression compares with, as the
// threshold annotation must spell it.
func thresholdOf(t *testing.T, alert string, expr parser.Expr) string {
	t.Helper()
	bin, ok := expr.(*parser.BinaryExpr)
	require.True(t, ok && bin.Op.IsComparisonOperator(), "alert %s is not a comparison", alert)
	num, ok := bin.RHS.(*parser.NumberLiteral)
	require.True(t, ok, "alert %s does not compare with a number", alert)
	return strconv.FormatFloat(num.Val, 'f', -1, 64)
}

// readmeMetricsTable reads the "Metrics, alerts and what to do" table of
// docs/operations.md: for each series its first cell names, the row's
// "alert when" cell.
func readmeMetricsTable(t *testing.T) map[string]string {
	t.Helper()
	raw, err := os.ReadFile(readmeFile)
	require.NoError(t, err)
	_, section, ok := strings.Cut(string(raw), "## Metrics, alerts and what to do\n")
	require.True(t, ok, "%s has no metrics table", readmeFile)
	section, _, _ = strings.Cut(section, "\n## ")
	out := map[string]string{}
	for _, line := range strings.Split(section, "\n") {
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		cells := strings.Split(line, " | ")
		require.GreaterOrEqual(t, len(cells), 3, "docs/operations.md row %q", line)
		for _, m := range seriesInCell.FindAllStringSubmatch(cells[0], -1) {
			out[m[1]] = cells[2]
		}
	}
	return out
}

var seriesInCell = regexp.MustCompile("`((?:aivedio|api|rocketmq)_[a-z_]+)(?:\\{[^}`]*\\})?`")
