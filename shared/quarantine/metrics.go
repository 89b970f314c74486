package quarantine

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/aivedio/pipeline/shared/catalog"
	"github.com/aivedio/pipeline/shared/pg"
)

// The open quarantine as gauges, read from PostgreSQL at each scrape.
var (
	openDesc = prometheus.NewDesc("aivedio_quarantine_open",
		"Open (QUARANTINED) messages by consumer group, its owner, and category (CODE_DEFECT, DATA_DEFECT, PERMISSION, DEPENDENCY, DIRTY_HISTORY).",
		[]string{"consumer_group", "owner", "category"}, nil)
	overdueDesc = prometheus.NewDesc("aivedio_quarantine_overdue",
		"Open messages past their consumer group's handling deadline (first failure plus the catalog's HandleWithin), by group and owner.",
		[]string{"consumer_group", "owner"}, nil)
	oldestDesc = prometheus.NewDesc("aivedio_quarantine_oldest_open_age_seconds",
		"Age of the oldest open message's first failure, by consumer group and owner; 0 when none is open.",
		[]string{"consumer_group", "owner"}, nil)
)

// collectTimeout bounds one scrape's query.
const collectTimeout = 2 * time.Second

// Collector exports the open quarantine of groups for alerting: how many
// messages by category, how many are overdue, and how old the oldest is.
// The DLQ drainer of a group exports its group; `go run ./local` exports
// them all. A scrape the database does not answer in time exports nothing
// (an absent series, not a zero).
func Collector(db pg.Querier, groups []catalog.Group) prometheus.Collector {
	return &collector{db: db, groups: groups}
}

type collector struct {
	db     pg.Querier
	groups []catalog.Group
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- openDesc
	ch <- overdueDesc
	ch <- oldestDesc
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), collectTimeout)
	defer cancel()
	now := time.Now()
	for _, g := range c.groups {
		counts, err := OpenCounts(ctx, c.db, g.Name, g.HandleWithin)
		if err != nil {
			return
		}
		byCategory := map[Category]int{}
		overdue := 0
		var oldest time.Time
		for _, o := range counts {
			byCategory[o.Category] += o.Count
			overdue += o.Overdue
			if oldest.IsZero() || o.OldestFailed.Before(oldest) {
				oldest = o.OldestFailed
			}
		}
		for _, cat := range Categories() {
			ch <- prometheus.MustNewConstMetric(openDesc, prometheus.GaugeValue, float64(byCategory[cat]), g.Name, g.Owner, string(cat))
		}
		ch <- prometheus.MustNewConstMetric(overdueDesc, prometheus.GaugeValue, float64(overdue), g.Name, g.Owner)
		age := 0.0
		if !oldest.IsZero() {
			age = now.Sub(oldest).Seconds()
		}
		ch <- prometheus.MustNewConstMetric(oldestDesc, prometheus.GaugeValue, age, g.Name, g.Owner)
	}
}
