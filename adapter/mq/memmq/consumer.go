package memmq

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/aivedio/pipeline/adapter/mq"
)

// defaultAwait is the long poll of a Consumer opened with await 0, as in
// package mq/rocketmq.
const defaultAwait = 20 * time.Second

// Consumer receives the messages of one consumer group. It is safe for
// concurrent use; several Consumers of one group share its messages.
type Consumer struct {
	b     *Broker
	group *group
	subs  []*subscription // sorted by topic name
	await time.Duration

	// guarded by b.mu
	closed bool
	next   int // subscription the next Receive starts at, for fairness
}

var _ mq.Consumer = (*Consumer)(nil)

// Consumer opens a consumer of group reading filters, which maps each topic
// name to its tag expression ("*" or "A||B"). A Receive that finds nothing
// returns after await (20 s when zero). The group and every topic must
// exist; a consumer group's first subscription to a topic starts at the
// topic's oldest retained message.
func (b *Broker) Consumer(group string, filters map[string]string, await time.Duration) (*Consumer, error) {
	if await <= 0 {
		await = defaultAwait
	}
	if len(filters) == 0 {
		return nil, fmt.Errorf("open consumer for %s: subscribe to at least one topic", group)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	g, ok := b.groups[group]
	if !ok {
		return nil, fmt.Errorf("open consumer: %w %q", ErrUnknownGroup, group)
	}
	c := &Consumer{b: b, group: g, await: await}
	for _, name := range slices.Sorted(maps.Keys(filters)) {
		t, err := b.topicLocked(name)
		if err != nil {
			return nil, fmt.Errorf("open consumer for %s: %w", group, err)
		}
		c.subs = append(c.subs, b.subscribeLocked(g, t, filters[name]))
	}
	if err := b.flushLocked(); err != nil {
		return nil, fmt.Errorf("open consumer for %s: %w", group, err)
	}
	return c, nil
}

// Receive waits up to the consumer's await duration for at most n
// messages, each invisible to the group for invisible. It returns an empty
// slice when none comes, and ctx's error when ctx ends first.
func (c *Consumer) Receive(ctx context.Context, n int, invisible time.Duration) ([]*mq.Received, error) {
	b := c.b
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("receive: %w", err)
	}
	if n <= 0 {
		return nil, fmt.Errorf("receive: max must be positive, got %d", n)
	}
	if invisible < b.minInvisible {
		return nil, fmt.Errorf("receive: invisible duration %s is below the minimum %s", invisible, b.minInvisible)
	}
	timer := time.NewTimer(c.await)
	defer timer.Stop()
	for {
		b.mu.Lock()
		if err := c.checkLocked("receive"); err != nil {
			b.mu.Unlock()
			return nil, err
		}
		now := b.now()
		out := c.collectLocked(now, n, invisible)
		wake, changed := c.nextVisibleLocked(now), b.changed // zero wake: nothing pending
		err := b.flushLocked()
		b.mu.Unlock()
		if err != nil {
			// What was taken stays invisible for its time, then comes back.
			return nil, fmt.Errorf("receive: %w", err)
		}
		if len(out) > 0 {
			return out, nil
		}
		if !wait(ctx, timer.C, changed, wake.Sub(now)) {
			if err := ctx.Err(); err != nil {
				return nil, fmt.Errorf("receive: %w", err)
			}
			return []*mq.Received{}, nil
		}
	}
}

// wait blocks until something changed or a message may have become visible
// (after soon, if positive), and reports false when the await or ctx ended.
func wait(ctx context.Context, await <-chan time.Time, changed <-chan struct{}, soon time.Duration) bool {
	var visible <-chan time.Time
	if soon > 0 {
		t := time.NewTimer(max(soon, time.Millisecond))
		defer t.Stop()
		visible = t.C
	}
	select {
	case <-ctx.Done():
		return false
	case <-await:
		return false
	case <-changed:
	case <-visible:
	}
	return true
}

// Ack settles msg for good. It fails with [ErrInvalidHandle] once the
// delivery has expired, been settled, or been replaced.
func (c *Consumer) Ack(ctx context.Context, msg *mq.Received) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("ack %s: %w", msg.MessageID, err)
	}
	b := c.b
	b.mu.Lock()
	defer b.mu.Unlock()
	e, err := c.deliveryLocked("ack "+msg.MessageID, msg)
	if err != nil {
		return err
	}
	b.settleLocked(subOf(msg), e)
	b.notifyLocked() // may unblock a FIFO queue
	if err := b.flushLocked(); err != nil {
		return fmt.Errorf("ack %s: %w", msg.MessageID, err)
	}
	return nil
}

// ChangeInvisibleDuration makes msg visible again after d, when it is
// delivered again with one more attempt. msg's handle is replaced, so msg
// can still be acknowledged before then.
func (c *Consumer) ChangeInvisibleDuration(ctx context.Context, msg *mq.Received, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("change invisible duration of %s: %w", msg.MessageID, err)
	}
	b := c.b
	b.mu.Lock()
	defer b.mu.Unlock()
	e, err := c.deliveryLocked("change invisible duration of "+msg.MessageID, msg)
	if err != nil {
		return err
	}
	b.tokens++
	e.token = b.tokens
	e.visibleAt = b.now().Add(max(d, 0))
	e.held = false // it returns at visibleAt, handled or not
	msg.Handle.(*receipt).token = e.token
	b.journalEntryLocked(subOf(msg), e)
	b.notifyLocked()
	if err := b.flushLocked(); err != nil {
		return fmt.Errorf("change invisible duration of %s: %w", msg.MessageID, err)
	}
	return nil
}

// Close ends the consumer; later calls fail. Messages it received and did
// not settle are delivered again after their invisible duration.
func (c *Consumer) Close() error {
	c.b.mu.Lock()
	defer c.b.mu.Unlock()
	c.closed = true
	c.b.notifyLocked()
	return nil
}

// receipt is the Handle of a delivered message.
type receipt struct {
	b     *Broker
	sub   *subscription
	entry *entry
	token uint64
}

// subOf is the subscription of a message whose handle deliveryLocked accepted.
func subOf(msg *mq.Received) *subscription { return msg.Handle.(*receipt).sub }

func (c *Consumer) checkLocked(op string) error {
	if c.closed {
		return fmt.Errorf("%s: consumer is closed", op)
	}
	return c.b.checkUpLocked(op)
}

// deliveryLocked finds the entry msg's handle names, if its delivery is current.
func (c *Consumer) deliveryLocked(op string, msg *mq.Received) (*entry, error) {
	if err := c.checkLocked(op); err != nil {
		return nil, err
	}
	r, ok := msg.Handle.(*receipt)
	if !ok || r.b != c.b || r.sub.group != c.group {
		return nil, fmt.Errorf("%s: %w: not received by a consumer of group %s on this broker", op, ErrInvalidHandle, c.group.name)
	}
	e := r.entry
	switch {
	case e.settled:
		return nil, fmt.Errorf("%s: %w: already settled", op, ErrInvalidHandle)
	case e.token != r.token:
		return nil, fmt.Errorf("%s: %w: replaced by a later delivery or change", op, ErrInvalidHandle)
	case !e.inFlight(c.b.now()):
		return nil, fmt.Errorf("%s: %w: invisible duration expired", op, ErrInvalidHandle)
	}
	return e, nil
}
