package source

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/adapter/cerocketmq"
	"github.com/aivedio/pipeline/adapter/mq"
	"github.com/aivedio/pipeline/shared/catalog"
	"github.com/aivedio/pipeline/shared/dbtest"
	"github.com/aivedio/pipeline/shared/delivery"
	"github.com/aivedio/pipeline/shared/envelope"
	"github.com/aivedio/pipeline/shared/outcome"
	"github.com/aivedio/pipeline/shared/quarantine"
)

// settlements records what a consumer was asked to do with each message.
type settlements struct {
	mq.Consumer
	mu    sync.Mutex
	calls []string // "ack" or "retry <duration>"
}

func (c *settlements) Ack(context.Context, *mq.Received) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls = append(c.calls, "ack")
	return nil
}

func (c *settlements) ChangeInvisibleDuration(_ context.Context, _ *mq.Received, d time.Duration) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls = append(c.calls, "retry "+d.String())
	return nil
}

// TestEachVerdictIsSettledOnce: whatever the chain decides, the message
// is settled exactly once, as the verdict says (docs/design.md §6), or, when
// the source stops under a failing delivery, not at all.
func TestEachVerdictIsSettledOnce(t *testing.T) {
	t.Parallel()
	pool := dbtest.TestSchema(t)
	topic := catalog.Topic{Name: "t_settle", Type: catalog.Normal}
	group := catalog.Group{Name: "cg.source.settle.v1", Subscriptions: []catalog.Subscription{{Topic: topic}}}

	valid := func(t *testing.T) *mq.Received {
		env, err := envelope.New(envelope.NewParams{
			EventType: "test.happened", Producer: "test", AggregateType: "generation_task",
			AggregateID: uuid.NewString(), TenantID: uuid.NewString(), Payload: map[string]any{"n": 1},
		})
		require.NoError(t, err)
		ev, err := env.ToCloudEvent()
		require.NoError(t, err)
		msg := &mq.Received{MessageID: uuid.NewString(), DeliveryAttempt: 2, BornAt: time.Now()}
		msg.Topic = topic.BrokerName()
		require.NoError(t, cerocketmq.WriteMessage(context.Background(), binding.ToMessage(&ev), &msg.Message))
		return msg
	}
	notCE := func(*testing.T) *mq.Received {
		return &mq.Received{MessageID: uuid.NewString(), DeliveryAttempt: 1, Message: mq.Message{Topic: topic.BrokerName(), Body: []byte("{nope")}}
	}

	for name, tt := range map[string]struct {
		msg        func(*testing.T) *mq.Received
		err        error
		stop       bool // the work context ends during the delivery
		quarantine quarantine.Execer
		want       []string
		result     result
	}{
		"success":               {msg: valid, want: []string{"ack"}, result: resultAcked},
		"permanent":             {msg: valid, err: outcome.Permanentf("tenant.mismatch", "no"), want: []string{"ack"}, result: resultQuarantined},
		"not a cloudevent":      {msg: notCE, want: []string{"ack"}, result: resultQuarantined},
		"retryable":             {msg: valid, err: errors.New("down"), want: []string{"retry 7s"}, result: resultRetry},
		"retry after":           {msg: valid, err: outcome.RetryAfter("held", errors.New("held"), 1500*time.Millisecond), want: []string{"retry 1.5s"}, result: resultRetry},
		"quarantine fails":      {msg: notCE, quarantine: failingQuarantine{}, want: []string{"retry 7s"}, result: resultRetry},
		"stopped while failing": {msg: valid, err: errors.New("canceled"), stop: true, want: nil, result: resultAbandoned},
		"stopped, yet success":  {msg: valid, stop: true, want: []string{"ack"}, result: resultAcked},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			c := &settlements{}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			q := tt.quarantine
			if q == nil {
				q = pool
			}
			s := New(Params{
				Group: group, Consumers: []mq.Consumer{c}, Quarantine: q,
				RetryDelay: func(int) time.Duration { return 7 * time.Second },
				Deliverer: delivery.Func(func(context.Context, event.Event) (*event.Event, error) {
					if tt.stop {
						cancel()
					}
					return nil, tt.err
				}),
			})
			v := s.handle(ctx, c, tt.msg(t))
			require.Equal(t, tt.result, v.result())
			require.Equal(t, tt.want, c.calls)
		})
	}
}

// failingQuarantine is a database that is down.
type failingQuarantine struct{ quarantine.Execer }

func (failingQuarantine) Exec(context.Context, string, ...any) (pgconn.CommandTag, error) {
	return pgconn.CommandTag{}, errors.New("connection refused")
}

func (failingQuarantine) QueryRow(context.Context, string, ...any) pgx.Row { return downRow{} }

type downRow struct{}

func (downRow) Scan(...any) error { return errors.New("connection refused") }
