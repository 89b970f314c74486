package source_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/aivedio/pipeline/adapter/cerocketmq"
	"github.com/aivedio/pipeline/adapter/mq"
	"github.com/aivedio/pipeline/adapter/mq/memmq"
	"github.com/aivedio/pipeline/adapter/source"
	"github.com/aivedio/pipeline/shared/catalog"
	"github.com/aivedio/pipeline/shared/delivery"
	"github.com/aivedio/pipeline/shared/envelope"
)

// BenchmarkDeliverAck is the adapter's cost per message on its hot path:
// receive from the in-process broker, decode, trace, deliver in process to
// a function that succeeds, ACK. One op is one message, sent and delivered
// before the next is sent, so ns/op is a latency, the broker's included.
// The success path touches no database: Quarantine is never called.
func BenchmarkDeliverAck(b *testing.B) {
	broker := memmq.New(&memmq.Opts{MinInvisible: time.Millisecond, Retain: 1})
	broker.Apply([]catalog.Topic{testTopic}, []catalog.Group{testGroup})
	c, err := broker.Consumer(testGroup.BrokerName(), map[string]string{testTopic.BrokerName(): "*"}, time.Second)
	if err != nil {
		b.Fatal(err)
	}
	delivered := make(chan struct{}, 1)
	fn := delivery.Func(func(context.Context, event.Event) (*event.Event, error) {
		delivered <- struct{}{}
		return nil, nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- source.New(source.Params{
			Group: testGroup, Consumers: []mq.Consumer{c}, Deliverer: fn, Quarantine: noDB{},
			Workers: 4, Invisible: 5 * time.Second,
		}).Run(ctx)
	}()
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
	sender := cerocketmq.NewSender(broker.Producer(), testTopic.BrokerName())

	b.ReportAllocs()
	for b.Loop() {
		if _, err := sender.SendMessage(context.Background(), binding.ToMessage(&ev)); err != nil {
			b.Fatal(err)
		}
		<-delivered
	}
	cancel()
	if err := <-done; err != nil {
		b.Fatal(err)
	}
}

// noDB is a quarantine store the success path must never reach.
type noDB struct{}

var errNoDB = errors.New("benchmark: no database")

func (noDB) Exec(context.Context, string, ...any) (pgconn.CommandTag, error) {
	return pgconn.CommandTag{}, errNoDB
}
func (noDB) Query(context.Context, string, ...any) (pgx.Rows, error) { return nil, errNoDB }
func (noDB) QueryRow(context.Context, string, ...any) pgx.Row        { return nil }
