package stack

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/aivedio/pipeline/adapter/dlq"
	"github.com/aivedio/pipeline/adapter/mq"
	"github.com/aivedio/pipeline/adapter/mq/memmq"
	"github.com/aivedio/pipeline/adapter/mq/rocketmq"
	"github.com/aivedio/pipeline/shared/catalog"
	"github.com/aivedio/pipeline/shared/config"
)

// Emulator is the in-process broker with the catalog applied.
type Emulator struct {
	*memmq.Broker
	Await time.Duration // long poll of a Receive; 2 s when zero
}

// NewEmulator returns an emulator broker with every catalog topic and
// group, in memory.
func NewEmulator() *Emulator {
	b := memmq.New(nil)
	b.Apply(catalog.Topics(), catalog.AllGroups())
	return &Emulator{Broker: b}
}

// OpenEmulator returns an emulator broker with every catalog topic and
// group that keeps its messages in the journal at path (memmq.Open), so a
// restarted process goes on with the messages of the one before.
func OpenEmulator(path string) (*Emulator, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("broker emulator directory: %w", err)
	}
	b, err := memmq.Open(path, nil)
	if err != nil {
		return nil, err
	}
	b.Apply(catalog.Topics(), catalog.AllGroups())
	return &Emulator{Broker: b}, nil
}

func (e *Emulator) await() time.Duration {
	if e.Await > 0 {
		return e.Await
	}
	return 2 * time.Second
}

// Producer publishes to the emulator.
func (e *Emulator) Producer() mq.Producer { return e.Broker.Producer() }

// Consumers opens one emulator consumer per subscription of g.
func (e *Emulator) Consumers(g catalog.Group) ([]mq.Consumer, error) {
	await := e.await()
	var out []mq.Consumer
	for _, sub := range g.Subscriptions {
		c, err := e.Broker.Consumer(g.BrokerName(), map[string]string{sub.Topic.BrokerName(): sub.FilterExpression()}, await)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, nil
}

// DeadLetters opens an emulator consumer of g's dead-letter topic as the
// drain group, once the emulator made the topic (with g's first dead
// letter); before, an error wrapping dlq.ErrNoTopic.
func (e *Emulator) DeadLetters(g catalog.Group) dlq.ConsumerFunc {
	return func(context.Context) (mq.Consumer, error) {
		c, err := e.Broker.Consumer(catalog.DLQDrain.BrokerName(), map[string]string{g.DLQTopic(): "*"}, e.await())
		if errors.Is(err, memmq.ErrUnknownTopic) {
			return nil, fmt.Errorf("open consumer of %s: %w: %w", g.DLQTopic(), dlq.ErrNoTopic, err)
		}
		return c, err
	}
}

// RocketMQ is a real RocketMQ 5 proxy. Close stops every client it opened.
type RocketMQ struct {
	// Logger gets the consumers' client replacements and recoveries; nil:
	// none.
	Logger    *slog.Logger
	cfg       config.RocketMQ
	producer  *rocketmq.Producer
	consumers []*rocketmq.Consumer
}

// NewRocketMQ starts a producer for every catalog topic. The topics and
// groups must exist (`adapter topics apply`).
func NewRocketMQ(cfg config.RocketMQ) (*RocketMQ, error) {
	var topics []string
	for _, t := range catalog.Topics() {
		topics = append(topics, t.BrokerName())
	}
	p, err := rocketmq.NewProducer(cfg, topics...)
	if err != nil {
		return nil, err
	}
	return &RocketMQ{cfg: cfg, producer: p}, nil
}

// Producer publishes to the proxy.
func (r *RocketMQ) Producer() mq.Producer { return r.producer }

// DeadLetters is nil on RocketMQ: its dead letters are drained by
// `adapter dlq drain`, one process per group, as in a deployment. The
// drain group and the stage groups' dead-letter topics are the broker's,
// shared by every process on it, so a pipeline in one process taking them
// would take other pipelines' dead letters into its own database.
func (r *RocketMQ) DeadLetters(catalog.Group) dlq.ConsumerFunc { return nil }

// Consumers opens the group's consumers on the proxy.
func (r *RocketMQ) Consumers(g catalog.Group) ([]mq.Consumer, error) {
	opened, err := rocketmq.OpenGroup(r.cfg, g, 5*time.Second, r.Logger)
	if err != nil {
		return nil, err
	}
	r.consumers = append(r.consumers, opened...)
	out := make([]mq.Consumer, len(opened))
	for i, c := range opened {
		out[i] = c
	}
	return out, nil
}

// Close stops the producer and every consumer.
func (r *RocketMQ) Close() error {
	errs := []error{r.producer.Close()}
	for _, c := range r.consumers {
		errs = append(errs, c.Close())
	}
	return errors.Join(errs...)
}
