package source_test

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/adapter/cerocketmq"
	"github.com/aivedio/pipeline/adapter/mq"
	"github.com/aivedio/pipeline/adapter/mq/memmq"
	"github.com/aivedio/pipeline/adapter/source"
	"github.com/aivedio/pipeline/functions/settle"
	"github.com/aivedio/pipeline/functions/stage"
	"github.com/aivedio/pipeline/functions/stage/stagetest"
	"github.com/aivedio/pipeline/shared/catalog"
	"github.com/aivedio/pipeline/shared/dbtest"
	"github.com/aivedio/pipeline/shared/delivery"
	"github.com/aivedio/pipeline/shared/task"
)

// quarantineRow is what an operator reads of a quarantined message, less
// the ids and times each delivery has of its own.
type quarantineRow struct {
	Consumer, EventID, Topic, Tag, ErrorClass, ErrorCode, ErrorDetail, Source string
}

// TestStageCodeSurvivesHTTP: a real stage refuses an event that names
// another tenant than its task's. Delivered in process and over HTTP (as
// in any deployment and in `go run ./local`), the message is quarantined
// with the stage's own code, security.tenant_mismatch (what docs/operations.md's
// security.* alert watches), in message_quarantine and in
// aivedio_adapter_quarantined_total, and the two paths give the same row
// and the same metric labels.
func TestStageCodeSurvivesHTTP(t *testing.T) {
	t.Parallel()
	pool := dbtest.TestSchema(t)
	owned := stagetest.NewTask(t, pool, nil)
	forged := owned
	forged.TenantID = uuid.New()
	fn := settle.New(settle.Params{Pool: pool})

	server := httptest.NewServer(stage.HTTPHandler(fn.Handle))
	t.Cleanup(server.Close)
	paths := []struct {
		name      string
		deliverer delivery.Deliverer
	}{
		{"in process", delivery.Func(fn.Handle)},
		{"over HTTP", delivery.NewHTTP(server.URL, 1, time.Second)},
	}
	rows := make([]quarantineRow, len(paths))
	series := make([]map[string]float64, len(paths))
	done := []string{} // not nil: ANY(NULL) matches nothing
	for i, path := range paths {
		// An event of its own per path: the same one again would be a
		// repeat of the first path's row.
		ev := stagetest.CloudEvent(t, forged, uuid.NewString(), catalog.EventSettleRequested,
			task.SettleRequested{TaskID: owned.ID, Status: task.Succeeded})
		reg := prometheus.NewRegistry()
		messageID := deliverOnce(t, pool, path.deliverer, source.NewMetrics(reg), done, func(p mq.Producer) {
			_, err := cerocketmq.NewSender(p, catalog.BillingSettle.BrokerName()).SendMessage(t.Context(), binding.ToMessage(&ev))
			require.NoError(t, err)
		})
		done = append(done, messageID)
		require.NoError(t, pool.QueryRow(t.Context(), `SELECT consumer_name, event_id::text, topic, coalesce(tag, ''), error_class,
				error_code, coalesce(error_detail, ''), source
			FROM message_quarantine WHERE message_id = $1`, messageID).Scan(&rows[i].Consumer, &rows[i].EventID, &rows[i].Topic,
			&rows[i].Tag, &rows[i].ErrorClass, &rows[i].ErrorCode, &rows[i].ErrorDetail, &rows[i].Source))
		require.Equal(t, "security.tenant_mismatch", rows[i].ErrorCode, path.name)
		require.Equal(t, "permanent", rows[i].ErrorClass, path.name)
		require.Equal(t, ev.ID(), rows[i].EventID, path.name)
		rows[i].EventID = ""
		rows[i].ErrorDetail = strings.ReplaceAll(rows[i].ErrorDetail, ev.ID(), "<event id>")
		require.Contains(t, rows[i].ErrorDetail, "belongs to another tenant", path.name)
		series[i] = quarantinedSeries(t, reg)
		require.Equal(t, map[string]float64{catalog.GroupSettle.Name + "/security.tenant_mismatch": 1}, series[i], path.name)
	}
	require.Equal(t, rows[0], rows[1], "in process and over HTTP quarantine alike")
	require.Equal(t, series[0], series[1], "in process and over HTTP count alike")
}

// deliverOnce runs the settle group's Source on a broker of its own until
// the message send puts there is quarantined, and returns its message id
// (the first quarantined one not in done).
func deliverOnce(t *testing.T, pool *pgxpool.Pool, d delivery.Deliverer, metrics *source.Metrics, done []string, send func(mq.Producer)) string {
	t.Helper()
	b := memmq.New(&memmq.Opts{MinInvisible: time.Millisecond})
	b.Apply([]catalog.Topic{catalog.BillingSettle}, []catalog.Group{catalog.GroupSettle})
	c, err := b.Consumer(catalog.GroupSettle.BrokerName(), map[string]string{catalog.BillingSettle.BrokerName(): "*"}, 50*time.Millisecond)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(t.Context())
	stopped := make(chan error, 1)
	go func() {
		stopped <- source.New(source.Params{Group: catalog.GroupSettle, Consumers: []mq.Consumer{c}, Deliverer: d, Quarantine: pool,
			Workers: 1, Invisible: 5 * time.Second, HandlerTimeout: 2 * time.Second, Metrics: metrics,
			RetryDelay: func(int) time.Duration { return 10 * time.Millisecond }}).Run(ctx)
	}()
	send(b.Producer())
	var messageID string
	require.Eventually(t, func() bool {
		err := pool.QueryRow(t.Context(), `SELECT message_id FROM message_quarantine
			WHERE consumer_name = $1 AND NOT message_id = ANY($2)`, catalog.GroupSettle.Name, done).Scan(&messageID)
		return err == nil
	}, 10*time.Second, 20*time.Millisecond)
	cancel()
	require.NoError(t, <-stopped)
	return messageID
}

// quarantinedSeries is aivedio_adapter_quarantined_total by
// "consumer_group/error_code".
func quarantinedSeries(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	families, err := reg.Gather()
	require.NoError(t, err)
	got := map[string]float64{}
	for _, f := range families {
		if f.GetName() != "aivedio_adapter_quarantined_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			got[labels["consumer_group"]+"/"+labels["error_code"]] = m.GetCounter().GetValue()
		}
	}
	return got
}
