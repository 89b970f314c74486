package cerocketmq

import (
	"cmp"
	"context"
	"io"
	"sync"
	"time"

	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/cloudevents/sdk-go/v2/protocol"

	"github.com/aivedio/pipeline/adapter/mq"
	"github.com/aivedio/pipeline/shared/config"
)

// ReceiverParams tunes a Receiver.
type ReceiverParams struct {
	// Batch is how many messages one broker receive asks for;
	// config.DefaultSourceWorkers when zero, as the source adapter takes.
	Batch int
	// Invisible is how long a received message stays hidden from the group
	// while it is handled; config.DefaultSourceInvisible when zero, as the
	// source adapter takes (RocketMQ's minimum is 10 s).
	Invisible time.Duration
	// RetryDelay gives the invisible duration after a failed attempt;
	// exponential from 10 s, capped at 10 min, when nil.
	RetryDelay RetryDelayFunc
	// SettleTimeout bounds one ACK or invisible-duration change; 10 s when zero.
	SettleTimeout time.Duration
}

// Receiver is a protocol.Receiver over one consumer group. Each message it
// returns must be finished: see the package doc for what Finish does.
type Receiver struct {
	consumer mq.Consumer
	params   ReceiverParams

	mu      sync.Mutex
	pending []*mq.Received
}

var _ protocol.Receiver = (*Receiver)(nil)

// NewReceiver reads from consumer.
func NewReceiver(consumer mq.Consumer, params ReceiverParams) *Receiver {
	params.Batch = cmp.Or(params.Batch, config.DefaultSourceWorkers)
	params.Invisible = cmp.Or(params.Invisible, config.DefaultSourceInvisible)
	if params.RetryDelay == nil {
		params.RetryDelay = ExponentialDelay(10*time.Second, 10*time.Minute)
	}
	if params.SettleTimeout == 0 {
		params.SettleTimeout = 10 * time.Second
	}
	return &Receiver{consumer: consumer, params: params}
}

// Receive returns the next message, long-polling the broker when none is
// buffered. It returns io.EOF once ctx is done.
func (r *Receiver) Receive(ctx context.Context) (binding.Message, error) {
	for {
		if next := r.pop(); next != nil {
			return NewMessage(next, settleFunc(r.consumer, next, r.params.RetryDelay, r.params.SettleTimeout)), nil
		}
		if ctx.Err() != nil {
			return nil, io.EOF
		}
		batch, err := r.consumer.Receive(ctx, r.params.Batch, r.params.Invisible)
		if err != nil {
			if ctx.Err() != nil {
				return nil, io.EOF
			}
			return nil, err
		}
		r.mu.Lock()
		r.pending = append(r.pending, batch...)
		r.mu.Unlock()
	}
}

func (r *Receiver) pop() *mq.Received {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.pending) == 0 {
		return nil
	}
	next := r.pending[0]
	r.pending = r.pending[1:]
	return next
}

// ExponentialDelay doubles from base with each attempt, up to limit.
func ExponentialDelay(base, limit time.Duration) RetryDelayFunc {
	return func(attempt int) time.Duration {
		d := base
		for i := 1; i < attempt && d < limit; i++ {
			d *= 2
		}
		return min(d, limit)
	}
}
