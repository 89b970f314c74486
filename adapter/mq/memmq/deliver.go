package memmq

import (
	"time"

	"github.com/aivedio/pipeline/adapter/mq"
	"github.com/aivedio/pipeline/shared/catalog"
)

// collectLocked delivers up to n visible messages of the consumer's
// subscriptions, each invisible until now+invisible, starting at a different
// subscription each call so that no topic starves another.
func (c *Consumer) collectLocked(now time.Time, n int, invisible time.Duration) []*mq.Received {
	var out []*mq.Received
	for i := range c.subs {
		if len(out) == n {
			break
		}
		sub := c.subs[(c.next+i)%len(c.subs)]
		out = c.b.collectSubLocked(sub, now, n-len(out), invisible, out)
	}
	c.next = (c.next + 1) % len(c.subs)
	return out
}

// collectSubLocked appends up to n deliveries from one subscription to out.
// On the way it drops settled entries, settles messages the filter rejects,
// and moves messages past the group's delivery attempts to its dead-letter
// topic, as the proxy does when it pops them.
func (b *Broker) collectSubLocked(sub *subscription, now time.Time, n int, invisible time.Duration, out []*mq.Received) []*mq.Received {
	orderly := sub.group.orderly && sub.topic.typ == catalog.FIFO
	var blocked map[int]bool // FIFO queues with a message in flight
	if orderly {
		blocked = map[int]bool{}
		for _, e := range sub.entries {
			if e.inFlight(now) {
				blocked[e.msg.queue] = true
			}
		}
	}
	taken := 0
	kept := sub.entries[:0]
	for _, e := range sub.entries {
		delivered := false
		if !e.settled && taken < n && !now.Before(e.visibleAt) && !blocked[e.msg.queue] {
			switch {
			case !sub.filter.accepts(e.msg.msg.Tag):
				b.settleLocked(sub, e)
			case e.attempts >= sub.group.maxAttempts:
				b.deadLetterLocked(sub, e)
			default:
				out = append(out, b.deliverLocked(sub, e, now, invisible))
				taken++
				delivered = true
			}
		}
		if orderly && !e.settled && !delivered {
			// An unsettled message left behind holds back the rest of its
			// queue; those delivered just now may go out with it as one batch.
			blocked[e.msg.queue] = true
		}
		if !e.settled {
			kept = append(kept, e)
		}
	}
	clear(sub.entries[len(kept):])
	sub.entries = kept
	return out
}

// deliverLocked hands e out once more.
func (b *Broker) deliverLocked(sub *subscription, e *entry, now time.Time, invisible time.Duration) *mq.Received {
	b.tokens++
	e.attempts++
	e.token = b.tokens
	e.visibleAt = now.Add(invisible)
	e.held = true
	b.journalEntryLocked(sub, e)
	return &mq.Received{
		Message:         copyMessage(&e.msg.msg),
		MessageID:       e.msg.id,
		DeliveryAttempt: e.attempts,
		BornAt:          e.msg.bornAt,
		Handle:          &receipt{b: b, sub: sub, entry: e, token: e.token},
	}
}

// nextVisibleLocked is the earliest time after now at which an entry of the
// consumer's subscriptions becomes visible, or zero if none will.
func (c *Consumer) nextVisibleLocked(now time.Time) time.Time {
	var next time.Time
	for _, sub := range c.subs {
		for _, e := range sub.entries {
			if !e.settled && e.visibleAt.After(now) && (next.IsZero() || e.visibleAt.Before(next)) {
				next = e.visibleAt
			}
		}
	}
	return next
}
