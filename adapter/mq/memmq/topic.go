package memmq

import (
	"hash/fnv"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/aivedio/pipeline/adapter/mq"
	"github.com/aivedio/pipeline/shared/catalog"
)

// topic is one topic: what it keeps for later subscribers and which groups
// subscribe to it.
type topic struct {
	name string
	typ  catalog.MessageType
	log  []*stored // the newest Retain messages, oldest first
	subs []*subscription
	next uint64 // pos of the next message appended
}

// stored is a message as the broker keeps it; it is never changed after Send.
type stored struct {
	msg    mq.Message // deep copy, times at millisecond precision
	id     string
	bornAt time.Time
	queue  int    // FIFO queue, from the message group
	pos    uint64 // place in the topic's append order
	// carried is how often the message was delivered before it was moved to
	// a dead-letter topic.
	carried int
}

// group is a consumer group and its subscriptions, one per topic.
type group struct {
	name        string
	maxAttempts int
	orderly     bool
	subs        map[string]*subscription
}

// subscription is a group's state on one topic: every message of the topic
// the group has not settled, in send order.
type subscription struct {
	group   *group
	topic   *topic
	filter  tagFilter
	expr    string // the filter as given, for the journal
	entries []*entry
}

// entry is one message as one group sees it.
type entry struct {
	msg       *stored
	attempts  int       // deliveries so far
	visibleAt time.Time // delivery time, or end of the current invisibility
	token     uint64    // receipt of the current delivery; 0 before the first
	// held is true from a delivery until its settlement or a
	// ChangeInvisibleDuration: a consumer is handling the message. A
	// journaled broker opened again makes held messages visible at once,
	// since their consumers ended with the process.
	held    bool
	settled bool
}

// inFlight reports whether the entry is delivered and still invisible.
func (e *entry) inFlight(now time.Time) bool {
	return e.token != 0 && !e.settled && now.Before(e.visibleAt)
}

// appendLocked stores msg on t and hands it to every subscription of t.
func (b *Broker) appendLocked(t *topic, s *stored) {
	s.pos = t.next
	t.next++
	b.journalLocked(record{M: &msgRecord{Topic: t.name, ID: s.id, BornAt: s.bornAt, Queue: s.queue, Carried: s.carried, Msg: s.msg}})
	t.log = append(t.log, s)
	if over := len(t.log) - b.retain; over > 0 {
		clear(t.log[:over]) // let the dropped messages go; append reallocates later
		t.log = t.log[over:]
	}
	for _, sub := range t.subs {
		sub.entries = append(sub.entries, newEntry(s))
	}
	b.notifyLocked()
}

func newEntry(s *stored) *entry {
	visible := s.bornAt
	if !s.msg.DeliveryTime.IsZero() {
		visible = s.msg.DeliveryTime
	}
	return &entry{msg: s, attempts: s.carried, visibleAt: visible}
}

// subscribeLocked returns g's subscription to t, creating it with every
// retained message of t, and sets its filter.
func (b *Broker) subscribeLocked(g *group, t *topic, expr string) *subscription {
	sub, ok := g.subs[t.name]
	if !ok {
		sub = &subscription{group: g, topic: t}
		for _, s := range t.log {
			sub.entries = append(sub.entries, newEntry(s))
		}
		g.subs[t.name] = sub
		t.subs = append(t.subs, sub)
	}
	if !ok || sub.expr != expr {
		b.journalLocked(record{S: &subRecord{Group: g.name, Topic: t.name, Filter: expr}})
	}
	sub.filter, sub.expr = parseTagFilter(expr), expr
	return sub
}

// deadLetterLocked settles e for its group and moves a copy of its message
// to the group's dead-letter topic, creating that topic on first use.
func (b *Broker) deadLetterLocked(sub *subscription, e *entry) {
	b.settleLocked(sub, e)
	name := dlqPrefix + sub.group.name
	t, ok := b.topics[name]
	if !ok {
		b.createTopicLocked(name, catalog.Normal)
		t = b.topics[name]
	}
	c := *e.msg
	c.msg = copyMessage(&e.msg.msg)
	c.msg.Topic = name
	c.msg.DeliveryTime = time.Time{}
	c.carried = e.attempts
	b.appendLocked(t, &c)
}

// settleLocked settles e for good.
func (b *Broker) settleLocked(sub *subscription, e *entry) {
	e.settled, e.held = true, false
	b.journalEntryLocked(sub, e)
}

// queueOf maps a message group to one of n FIFO queues.
func queueOf(messageGroup string, n int) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(messageGroup))
	return int(h.Sum32() % uint32(n))
}

// copyMessage returns a deep copy of m.
func copyMessage(m *mq.Message) mq.Message {
	c := *m
	c.Keys = slices.Clone(m.Keys)
	c.Properties = maps.Clone(m.Properties)
	c.Body = slices.Clone(m.Body)
	return c
}

// tagFilter is a parsed tag expression: nil accepts every tag.
type tagFilter map[string]bool

// parseTagFilter parses "*" or "A||B".
func parseTagFilter(expr string) tagFilter {
	expr = strings.TrimSpace(expr)
	if expr == "" || expr == "*" {
		return nil
	}
	f := tagFilter{}
	for _, tag := range strings.Split(expr, "||") {
		if tag = strings.TrimSpace(tag); tag != "" {
			f[tag] = true
		}
	}
	return f
}

func (f tagFilter) accepts(tag string) bool { return f == nil || f[tag] }
