//go:build !race

package kernelbench_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/aivedio/pipeline/adapter/mq"
	"github.com/aivedio/pipeline/adapter/mq/rocketmqtest"
	"github.com/aivedio/pipeline/shared/catalog"
	"github.com/aivedio/pipeline/shared/config"
)

// The bare pair sends from 8 goroutines, like the relay's publishers, and
// bounds the messages in flight like the source's workers.
const (
	bareSenders  = 8
	bareInFlight = 32
)

// BenchmarkBareBroker is the broker's ceiling on this machine: a v5
// producer sending from several goroutines and simple consumers receiving
// and ACKing, with no database and no CloudEvents. The consumers receive
// the way the source does (one Receive in flight per consumer, asking for
// as many messages as there are free slots, each message ACKed by its own
// goroutine). One b.Loop iteration sends 2,000 messages and waits for the
// last ACK; events/s is the figure, and the latencies run from just before
// Send to the ACK. It runs with 1 and with 4 consumers: concurrent
// Receives of one group cost the proxy more CPU per message, so one
// consumer is the faster on a CPU-bound machine; the best is the ceiling.
func BenchmarkBareBroker(b *testing.B) {
	cfg := rocketmqtest.Config(b)
	gs := benchGroups(b, cfg)
	for _, tt := range []struct {
		consumers int
		group     catalog.Group
	}{{1, gs.bare1}, {4, gs.bare4}} {
		b.Run(fmt.Sprintf("consumers=%d", tt.consumers), func(b *testing.B) { benchBare(b, cfg, tt.group, tt.consumers) })
	}
}

func benchBare(b *testing.B, cfg config.RocketMQ, group catalog.Group, consumerCount int) {
	send, track := bareRig(b, cfg, group, consumerCount)
	send(warmUp)
	track.reset()
	cpu := sampleCPU()
	b.ReportAllocs()
	for b.Loop() {
		send(kernelRound)
	}
	b.ReportMetric(float64(b.N*kernelRound)/b.Elapsed().Seconds(), "events/s")
	track.report(b)
	// This process is the RocketMQ client alone: what its own logging
	// costs shows here (make bench runs it at info and at warn).
	b.ReportMetric(logCPU(b, cpu, b.N*kernelRound), "client-cpu-s/1k")
}

// bareRig starts a producer and consumerCount consumers of group, on a tag
// of their own, stopped in cleanup. send(n) sends n messages from
// bareSenders goroutines and returns once each is ACKed.
func bareRig(b *testing.B, cfg config.RocketMQ, group catalog.Group, consumerCount int) (send func(n int), track *tracker) {
	tag := rocketmqtest.UniqueName("kb")
	track = newTracker(bareSegments)
	producer := newProducer(b, cfg)
	consumers := newConsumers(b, cfg, group, tag, consumerCount, track)

	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	slots := make(chan struct{}, bareInFlight)
	for _, c := range consumers {
		wg.Go(func() { receiveAndAck(ctx, c, slots, &wg) })
	}
	b.Cleanup(func() { cancel(); wg.Wait() })

	send = func(n int) {
		done := track.expect(n)
		var senders sync.WaitGroup
		for s := range bareSenders {
			senders.Go(func() {
				for i := s; i < n; i += bareSenders {
					id := uuid.Must(uuid.NewV7()).String()
					body, _ := json.Marshal(payload{ID: id, V: 1, T: time.Now().UnixNano()})
					msg := &mq.Message{Topic: benchTopic.BrokerName(), Tag: tag, Keys: []string{id}, Body: body}
					if _, err := producer.Send(b.Context(), msg); err != nil {
						b.Error(err)
						return
					}
				}
			})
		}
		senders.Wait()
		if b.Failed() {
			b.FailNow()
		}
		select {
		case <-done:
		case <-time.After(settleTimeout):
			b.Fatalf("only %d messages acknowledged after %s", track.ackedCount(), settleTimeout)
		}
	}
	return send, track
}

// The warm-up's bounds. The proxy is a JVM: freshly started it spent 2.0
// CPU-ms per kernel event, and 0.55 once some 100,000 messages had passed
// (its JIT compiler at work). A broker in production runs for weeks; the
// benchmarks measure that steady state.
const (
	warmUpMin = 20 * time.Second
	warmUpMax = 2 * time.Minute
)

// warmBroker runs rounds of messages through the proxy's send, receive and
// ACK paths, untimed, before the first benchmark of the process, until the
// rate stops rising: the last five rounds no more than 3% faster than the
// five before.
func warmBroker(b *testing.B, cfg config.RocketMQ, group catalog.Group) {
	start := time.Now()
	send, _ := bareRig(b, cfg, group, 1)
	var rates []float64
	mean := func(xs []float64) float64 {
		sum := 0.0
		for _, x := range xs {
			sum += x
		}
		return sum / float64(len(xs))
	}
	for {
		round := time.Now()
		send(kernelRound)
		rates = append(rates, kernelRound/time.Since(round).Seconds())
		n := len(rates)
		elapsed := time.Since(start)
		steady := n >= 10 && mean(rates[n-5:]) <= 1.03*mean(rates[n-10:n-5])
		if (steady && elapsed >= warmUpMin) || elapsed >= warmUpMax {
			b.Logf("warmed the proxy up with %d messages in %s: %.0f events/s in the first round, %.0f in the last five",
				n*kernelRound, elapsed.Round(time.Second), rates[0], mean(rates[n-5:]))
			return
		}
	}
}

// receiveAndAck is the source's receive loop without the delivery: wait for
// a free slot, take every free one, Receive that many, ACK each message in a
// goroutine of its own. ACKs run to completion after ctx ends.
func receiveAndAck(ctx context.Context, c mq.Consumer, slots chan struct{}, wg *sync.WaitGroup) {
	for ctx.Err() == nil {
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			return
		}
		taken := 1
	more:
		for taken < cap(slots) {
			select {
			case slots <- struct{}{}:
				taken++
			default:
				break more
			}
		}
		msgs, err := c.Receive(ctx, taken, time.Minute)
		for range taken - len(msgs) {
			<-slots
		}
		if err != nil {
			select { // a stop, or a failure the next Receive retries
			case <-time.After(100 * time.Millisecond):
			case <-ctx.Done():
			}
			continue
		}
		for _, m := range msgs {
			wg.Go(func() {
				defer func() { <-slots }()
				actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
				defer cancel()
				_ = c.Ack(actx, m)
			})
		}
	}
}
