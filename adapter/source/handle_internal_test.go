package source

import (
	"context"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/google/uuid"

	"github.com/aivedio/pipeline/adapter/cerocketmq"
	"github.com/aivedio/pipeline/adapter/mq"
	"github.com/aivedio/pipeline/shared/catalog"
	"github.com/aivedio/pipeline/shared/delivery"
	"github.com/aivedio/pipeline/shared/envelope"
	"github.com/aivedio/pipeline/shared/quarantine"
)

// BenchmarkHandle is the delivery path alone, on one goroutine: decode,
// trace, deliver in process to a function that succeeds, settle with a
// consumer that ACKs at once. No broker and no scheduling are measured.
func BenchmarkHandle(b *testing.B) {
	topic := catalog.Topic{Name: "t_bench", Type: catalog.Normal}
	group := catalog.Group{Name: "cg.source.bench.v1", Subscriptions: []catalog.Subscription{{Topic: topic}}}
	env, err := envelope.New(envelope.NewParams{
		EventType: "test.happened", Producer: "test", AggregateType: "generation_task",
		AggregateID: uuid.NewString(), TenantID: uuid.NewString(), Payload: map[string]any{"n": 1},
	})
	if err != nil {
		b.Fatal(err)
	}
	ev, err := env.ToCloudEvent()
	if err != nil {
		b.Fatal(err)
	}
	msg := &mq.Received{MessageID: "m-1", DeliveryAttempt: 1, BornAt: time.Now()}
	msg.Topic = topic.BrokerName()
	if err := cerocketmq.WriteMessage(context.Background(), binding.ToMessage(&ev), &msg.Message); err != nil {
		b.Fatal(err)
	}
	c := ackAll{}
	s := New(Params{
		Group: group, Consumers: []mq.Consumer{c}, Quarantine: nopQuarantine{},
		Deliverer: delivery.Func(func(context.Context, event.Event) (*event.Event, error) { return nil, nil }),
	})
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		_ = s.handle(ctx, c, msg)
	}
}

// ackAll is a consumer that settles everything at once and receives nothing.
type ackAll struct{ mq.Consumer }

func (ackAll) Ack(context.Context, *mq.Received) error { return nil }
func (ackAll) ChangeInvisibleDuration(context.Context, *mq.Received, time.Duration) error {
	return nil
}

// nopQuarantine is a quarantine store the success path never reaches.
type nopQuarantine struct{ quarantine.Execer }
