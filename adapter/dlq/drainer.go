package dlq

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/aivedio/pipeline/adapter/mq"
	"github.com/aivedio/pipeline/shared/catalog"
	"github.com/aivedio/pipeline/shared/quarantine"
)

// Params configures a Drainer. Exactly one of Consumer and ConsumerFunc is
// set.
type Params struct {
	// Group is the stage group whose dead-letter topic is drained; its firm
	// name is the quarantine rows' consumer_name.
	Group catalog.Group
	// Consumer reads Group.DLQTopic() as catalog.DLQDrain. The caller owns
	// it. Use ConsumerFunc instead when the topic may not exist yet.
	Consumer mq.Consumer
	// ConsumerFunc opens that consumer lazily, and again after it failed;
	// the Drainer owns what it returns.
	ConsumerFunc ConsumerFunc
	DB           quarantine.Execer
	// Batch is how many dead letters one Receive asks for; 16 when zero.
	Batch int
	// Invisible is how long a received dead letter stays hidden while it is
	// recorded; 60 s when zero. It must cover Batch writes.
	Invisible time.Duration
	// RetryDelay is how long a dead letter whose write failed stays hidden
	// before it comes again; 5 min when zero. Each retry spends one of the
	// drain group's delivery attempts.
	RetryDelay time.Duration
	// WriteTimeout bounds one quarantine write and one ACK; 10 s when zero.
	WriteTimeout time.Duration
	// TopicPoll is how long Run waits before it tries again to open the
	// consumer of a dead-letter topic that does not exist yet; 10 s when zero.
	TopicPoll time.Duration
	// BackoffBase and BackoffMax shape Run's wait after a failed cycle,
	// doubling per consecutive failure; 1 s and 1 min when zero.
	BackoffBase, BackoffMax time.Duration
	Logger                  *slog.Logger
	Metrics                 *Metrics
}

// Drainer moves one group's dead letters into message_quarantine. It is safe
// for concurrent use.
type Drainer struct {
	p Params

	mu     sync.Mutex
	opened mq.Consumer // from ConsumerFunc; nil until opened
}

// New returns a Drainer; it panics on a missing dependency (a programming
// error at start-up).
func New(p Params) *Drainer {
	if p.Group.Name == "" || p.DB == nil || (p.Consumer == nil) == (p.ConsumerFunc == nil) {
		panic("dlq.New: Group, DB and exactly one of Consumer and ConsumerFunc are required")
	}
	if p.Batch <= 0 {
		p.Batch = 16
	}
	if p.Invisible <= 0 {
		p.Invisible = 60 * time.Second
	}
	if p.RetryDelay <= 0 {
		p.RetryDelay = 5 * time.Minute
	}
	if p.WriteTimeout <= 0 {
		p.WriteTimeout = 10 * time.Second
	}
	if p.TopicPoll <= 0 {
		p.TopicPoll = 10 * time.Second
	}
	if p.BackoffBase <= 0 {
		p.BackoffBase = time.Second
	}
	if p.BackoffMax <= 0 {
		p.BackoffMax = time.Minute
	}
	if p.Logger == nil {
		p.Logger = slog.New(slog.DiscardHandler)
	}
	if p.Metrics == nil {
		p.Metrics = NewMetrics(nil)
	}
	p.Logger = p.Logger.With(slog.String("consumer_group", p.Group.Name))
	return &Drainer{p: p}
}

// Run drains until ctx ends and returns nil then. Errors are logged and
// retried with backoff; a dead-letter topic that does not exist yet is
// looked for again every TopicPoll. On return it closes the consumer it
// opened; messages received and not yet recorded come back to the drain
// group after their invisible duration.
func (d *Drainer) Run(ctx context.Context) error {
	defer func() {
		if err := d.Close(); err != nil {
			d.p.Logger.WarnContext(ctx, "close dead-letter consumer", slog.String("error", err.Error()))
		}
	}()
	failures := 0
	waiting := false // logged once that the topic is missing
	for ctx.Err() == nil {
		_, err := d.drain(ctx)
		var wait time.Duration
		switch {
		case ctx.Err() != nil:
			return nil
		case errors.Is(err, ErrNoTopic):
			if !waiting {
				d.p.Logger.InfoContext(ctx, "no dead letters yet: the dead-letter topic does not exist; waiting for it",
					slog.String("topic", d.p.Group.DLQTopic()), slog.Duration("poll", d.p.TopicPoll))
				waiting = true
			}
			failures, wait = 0, d.p.TopicPoll
		case err != nil:
			failures++
			wait = d.backoff(failures)
			d.p.Metrics.errors.WithLabelValues(d.p.Group.Name).Inc()
			d.p.Logger.WarnContext(ctx, "drain cycle failed; retrying",
				slog.Int("failures", failures), slog.Duration("retry_in", wait), slog.String("error", err.Error()))
		default:
			if waiting {
				d.p.Logger.InfoContext(ctx, "draining the dead-letter topic", slog.String("topic", d.p.Group.DLQTopic()))
				waiting = false
			}
			failures = 0
			continue // Receive long-polls: no wait of our own
		}
		select {
		case <-time.After(wait):
		case <-ctx.Done():
		}
	}
	return nil
}

// backoff doubles from BackoffBase per consecutive failure, up to BackoffMax.
func (d *Drainer) backoff(failures int) time.Duration {
	w := d.p.BackoffBase
	for i := 1; i < failures && w < d.p.BackoffMax; i++ {
		w *= 2
	}
	return min(w, d.p.BackoffMax)
}

// DrainOnce receives one batch and records each dead letter in
// message_quarantine, ACKing it once its row is committed. It returns how
// many it recorded (a failed ACK after a recorded one is only logged: the
// redelivery finds the row); 0 and nil while the dead-letter topic does not
// exist yet. When a write fails, that message and the rest of the batch go
// back to the broker for RetryDelay, unACKed, and DrainOnce returns the
// error. When ctx ends mid-batch, the messages not yet recorded are left to
// come back after their invisible duration.
func (d *Drainer) DrainOnce(ctx context.Context) (int, error) {
	n, err := d.drain(ctx)
	if errors.Is(err, ErrNoTopic) {
		return 0, nil
	}
	return n, err
}

// drain is DrainOnce, reporting a missing topic as an error wrapping
// ErrNoTopic so that Run can wait for it.
func (d *Drainer) drain(ctx context.Context) (int, error) {
	c, err := d.consumer(ctx)
	if err != nil {
		return 0, err
	}
	batch, err := c.Receive(ctx, d.p.Batch, d.p.Invisible)
	if err != nil {
		return 0, fmt.Errorf("receive dead letters of %s: %w", d.p.Group.Name, err)
	}
	drained := 0
	for i, msg := range batch {
		if err := ctx.Err(); err != nil {
			return drained, fmt.Errorf("drain dead letters of %s: %w", d.p.Group.Name, err)
		}
		if err := d.record(ctx, msg); err != nil {
			d.handBack(ctx, c, batch[i:])
			return drained, err
		}
		d.ack(ctx, c, msg)
		drained++
	}
	return drained, nil
}

// consumer returns Params.Consumer, or the one ConsumerFunc opened, opening
// it on first use.
func (d *Drainer) consumer(ctx context.Context) (mq.Consumer, error) {
	if d.p.Consumer != nil {
		return d.p.Consumer, nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.opened == nil {
		c, err := d.p.ConsumerFunc(ctx)
		if err != nil {
			return nil, fmt.Errorf("open dead-letter consumer of %s: %w", d.p.Group.Name, err)
		}
		d.opened = c
	}
	return d.opened, nil
}

// Close closes the consumer ConsumerFunc opened, if any and if it has a
// Close method; a later DrainOnce opens a new one. A Consumer given in
// Params is the caller's to close.
func (d *Drainer) Close() error {
	d.mu.Lock()
	c := d.opened
	d.opened = nil
	d.mu.Unlock()
	if closer, ok := c.(interface{ Close() error }); ok {
		if err := closer.Close(); err != nil {
			return fmt.Errorf("close dead-letter consumer of %s: %w", d.p.Group.Name, err)
		}
	}
	return nil
}
