package rocketmq

import (
	"context"
	"errors"
	"fmt"
	"sync"

	rmq "github.com/apache/rocketmq-clients/golang/v5"

	"github.com/aivedio/pipeline/adapter/mq"
	"github.com/aivedio/pipeline/shared/config"
)

// Producer publishes through a RocketMQ proxy.
//
// After a proxy restart the v5.1.4 client does not send its settings
// again (see [Consumer]). The proxy reads no settings on a send, so sends
// go on (TestProxyRestartConsumersRecover shows it); only its heartbeats
// are refused, which matters to transactional producers, and this is not
// one. Should a send ever be refused for the lost settings, the client is
// replaced and the send tried once more through the new one.
type Producer struct {
	cfg    config.RocketMQ
	topics []string

	mu       sync.Mutex
	producer rmq.Producer
}

// NewProducer starts a producer for the given broker topics (at least one:
// the v5 client never finishes starting without a topic route). It may send
// to other topics too; their routes are fetched on first send.
func NewProducer(cfg config.RocketMQ, topics ...string) (*Producer, error) {
	if len(topics) == 0 {
		return nil, errors.New("new rocketmq producer: name at least one topic")
	}
	routeClientLog(cfg)
	p, err := startProducer(cfg, topics)
	if err != nil {
		return nil, err
	}
	return &Producer{cfg: cfg, topics: topics, producer: p}, nil
}

func startProducer(cfg config.RocketMQ, topics []string) (rmq.Producer, error) {
	for try := 1; ; try++ {
		p, err := rmq.NewProducer(clientConfig(cfg, ""), rmq.WithTopics(topics...))
		if err != nil {
			return nil, fmt.Errorf("new rocketmq producer: %w", err)
		}
		err = startWithin(p.Start, startTimeout)
		if err == nil {
			return p, nil
		}
		if !racedStart(err) || try == startTries {
			return nil, fmt.Errorf("start rocketmq producer at %s: %w", cfg.Endpoint, startError(cfg, err))
		}
		_ = p.GracefulStop()
	}
}

// Send publishes msg and waits for the broker to store it.
func (p *Producer) Send(ctx context.Context, msg *mq.Message) (string, error) {
	out := &rmq.Message{Topic: msg.Topic, Body: msg.Body}
	if msg.Tag != "" {
		out.SetTag(msg.Tag)
	}
	if len(msg.Keys) > 0 {
		out.SetKeys(msg.Keys...)
	}
	if msg.MessageGroup != "" {
		out.SetMessageGroup(msg.MessageGroup)
	}
	if !msg.DeliveryTime.IsZero() {
		out.SetDelayTimestamp(msg.DeliveryTime)
	}
	for k, v := range msg.Properties {
		out.AddProperty(k, v)
	}
	client := p.current()
	receipts, err := client.Send(ctx, out)
	if err != nil && settingsLost(err) && p.replace(client) == nil {
		receipts, err = p.current().Send(ctx, out)
	}
	if err != nil {
		return "", fmt.Errorf("send to %s: %w", msg.Topic, access(err))
	}
	if len(receipts) == 0 {
		return "", fmt.Errorf("send to %s: broker returned no receipt", msg.Topic)
	}
	return receipts[0].MessageID, nil
}

func (p *Producer) current() rmq.Producer {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.producer
}

// replace starts a new client in place of old, unless a concurrent send
// already did. Sends wait for it: they would fail on the old client.
func (p *Producer) replace(old rmq.Producer) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.producer != old {
		return nil
	}
	fresh, err := startProducer(p.cfg, p.topics)
	if err != nil {
		return err
	}
	p.producer = fresh
	go func() { _ = old.GracefulStop() }()
	return nil
}

// Close stops the producer.
func (p *Producer) Close() error { return p.current().GracefulStop() }
