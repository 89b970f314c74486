// Package source is the RocketMQ source adapter: it receives the messages of
// one consumer group, turns each into a CloudEvent and delivers it to the
// group's stage function, over HTTP or in process.
//
// # Guarantee
//
// A message is ACKed only after the function returned success, which a
// stage returns only after its inbox-protected transaction committed, or
// after the message was recorded in message_quarantine. Everything else goes
// back to the broker: its invisible duration becomes a backoff delay, and
// the broker redelivers it until the group's maximum delivery attempts move
// it to the dead-letter topic. So a message is processed at least once and
// never lost; the inbox makes its effect happen once.
//
// Outcomes (docs/design.md §6):
//
//   - success (2xx, nil), including duplicates and stale no-ops: ACK;
//   - poison (not a CloudEvent, invalid envelope, a 4xx, an
//     outcome.Permanent error): quarantine, then ACK;
//   - anything else (5xx, timeout, refused connection after the cold-start
//     budget): back to the broker with exponential backoff.
//
// # Delivery path
//
// Each message runs through a chain of small steps composed once at New,
// each one concern and each able to act on the answer on its way back:
// metrics, decode, trace, settle, quarantine, failure record,
// classification, poison rejection, the handler timeout, and last the
// delivery itself. The chain answers with one verdict (ACK, quarantined,
// retry after a delay, or abandoned at stop), and the settle step carries
// it out exactly once through the message's cerocketmq Finish. A message
// is never settled twice; one abandoned at stop is not settled at all.
//
// # Stopping
//
// Run starts no receive once its context ends, and waits up to DrainTimeout
// from then for messages in flight. Work still running after that is
// abandoned without an ACK: the broker redelivers it once its invisible
// duration ends. A receive already long-polling is not cut short: cut, it
// leaves the proxy holding what it takes for the rest of the poll, hidden
// for the whole invisible duration. It runs to its end instead (within the
// drain deadline), and what it brings goes straight back to the broker.
package source

import (
	"cmp"
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/aivedio/pipeline/adapter/mq"
	"github.com/aivedio/pipeline/shared/catalog"
	"github.com/aivedio/pipeline/shared/config"
	"github.com/aivedio/pipeline/shared/delivery"
	"github.com/aivedio/pipeline/shared/quarantine"
)

// Params configures a Source.
type Params struct {
	Group catalog.Group
	// Consumers read the group's subscriptions, one consumer per topic: a
	// RocketMQ simple consumer polls its topics in turn and waits out its
	// long poll on an empty one, which would stall the others.
	Consumers  []mq.Consumer
	Deliverer  delivery.Deliverer
	Quarantine quarantine.Execer // where poison is recorded
	// Workers bounds concurrent deliveries; config.DefaultSourceWorkers
	// when zero. One worker of them is each consumer's own, so that one
	// subscription's long deliveries never leave another without a receive
	// (a group has at least one worker per consumer whatever Workers says);
	// the rest are shared. Receive asks for no more messages than there are
	// free workers, so prefetch is bounded too.
	Workers int
	// Invisible is how long a received message stays hidden while it is
	// handled; config.DefaultSourceInvisible when zero. It must exceed
	// HandlerTimeout.
	Invisible time.Duration
	// HandlerTimeout bounds one delivery; config.DefaultSourceHandlerTimeout
	// when zero.
	HandlerTimeout time.Duration
	// RetryDelay gives the backoff after a failed attempt; exponential from
	// 10 s (RocketMQ's minimum invisible time) to 10 min when nil.
	RetryDelay RetryDelayFunc
	// DrainTimeout bounds the wait for in-flight work at stop; 30 s when zero.
	DrainTimeout time.Duration
	Logger       *slog.Logger
	Metrics      *Metrics
}

// Source runs one consumer group's delivery loop.
type Source struct {
	p      Params
	late   prometheus.Observer // the group's wake-up lateness
	series *series
	log    *slog.Logger // p.Logger with the group
	chain  handler      // the delivery path, composed once (see steps)

	topicSpans   map[string]topicSpans      // span names by subscribed topic
	deliverSpan  string                     // the deliver span's name
	deliverAttrs trace.SpanStartEventOption // and its attributes
}

// New returns a Source; it panics on a missing dependency (a programming
// error at start-up).
func New(p Params) *Source {
	if len(p.Consumers) == 0 || p.Deliverer == nil || p.Quarantine == nil || p.Group.Name == "" {
		panic("source.New: Group, Consumers, Deliverer and Quarantine are required")
	}
	p.Workers = cmp.Or(max(p.Workers, 0), config.DefaultSourceWorkers)
	p.Invisible = cmp.Or(max(p.Invisible, 0), config.DefaultSourceInvisible)
	p.HandlerTimeout = cmp.Or(max(p.HandlerTimeout, 0), config.DefaultSourceHandlerTimeout)
	if p.RetryDelay == nil {
		p.RetryDelay = ExponentialDelay(10*time.Second, 10*time.Minute)
	}
	if p.DrainTimeout <= 0 {
		p.DrainTimeout = 30 * time.Second
	}
	if p.Logger == nil {
		p.Logger = slog.New(slog.DiscardHandler)
	}
	if p.Metrics == nil {
		p.Metrics = NewMetrics(nil)
	}
	s := &Source{
		p:           p,
		late:        p.Metrics.lateness.WithLabelValues(p.Group.Name),
		series:      newSeries(p.Metrics, p.Group.Name),
		log:         p.Logger.With(slog.String("consumer_group", p.Group.Name)),
		topicSpans:  topicSpanNames(p.Group),
		deliverSpan: "deliver " + p.Group.Name,
		deliverAttrs: trace.WithAttributes(semconv.MessagingConsumerGroupName(p.Group.Name),
			semconv.MessagingOperationTypeProcess),
	}
	s.chain = compose(s.deliver, s.steps()...)
	return s
}

// Run receives and delivers until ctx ends, then drains. It returns nil
// after a clean stop; receive errors are logged and retried, never fatal.
func (s *Source) Run(ctx context.Context) error {
	// In-flight work outlives the receive loops' context so a stop lets it
	// finish and ACK; abandon cancels it after the drain timeout.
	work, abandon := context.WithCancel(context.WithoutCancel(ctx))
	defer abandon()
	// Receives under way at the stop run on until the drain deadline.
	receiving, stopReceiving := context.WithCancel(context.WithoutCancel(ctx))
	defer stopReceiving()
	stopped := make(chan time.Time, 1)
	context.AfterFunc(ctx, func() {
		stopped <- time.Now()
		time.AfterFunc(s.p.DrainTimeout, stopReceiving)
	})

	shared := make(chan struct{}, max(s.p.Workers-len(s.p.Consumers), 0))
	var (
		inFlight, loops sync.WaitGroup
		busy            atomic.Int64
	)
	for _, c := range s.p.Consumers {
		loops.Add(1)
		pool := &workers{own: make(chan struct{}, 1), shared: shared, busy: &busy}
		go func() {
			defer loops.Done()
			s.receiveLoop(ctx, receiving, work, c, pool, &inFlight)
		}()
	}
	loops.Wait()
	drainBy := (<-stopped).Add(s.p.DrainTimeout)

	drained := make(chan struct{})
	go func() { inFlight.Wait(); close(drained) }()
	select {
	case <-drained:
	case <-time.After(time.Until(drainBy)):
		s.p.Logger.Warn("drain timeout: abandoning in-flight messages without ACK", slog.String("consumer_group", s.p.Group.Name), slog.Int64("in_flight", busy.Load()))
		abandon()
		select {
		case <-drained:
		case <-time.After(abandonWait):
			// A deliverer that ignores cancellation must not hold the stop
			// forever; its message is unsettled and comes back.
			s.p.Logger.Error("in-flight deliveries ignored cancellation; stopping without them", slog.String("consumer_group", s.p.Group.Name))
		}
	}
	return nil
}

// abandonWait bounds the wait for canceled deliveries to return.
const abandonWait = 5 * time.Second

func (s *Source) pause(ctx context.Context, d time.Duration) {
	select {
	case <-time.After(d):
	case <-ctx.Done():
	}
}
