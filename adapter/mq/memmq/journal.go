package memmq

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"time"

	"github.com/aivedio/pipeline/adapter/mq"
	"github.com/aivedio/pipeline/shared/catalog"
)

// compactAtLeast is the smallest journal that is rewritten while the broker
// runs; past it, the journal is rewritten once it is four times the size of
// its last rewrite.
const compactAtLeast = 64 << 20

// journal is the file a broker opened with [Open] writes every change to,
// one JSON record a line, before the call that made it returns.
type journal struct {
	path      string
	f         *os.File
	pending   bytes.Buffer // records of the current call, written by flush
	size      int64
	compactAt int64
	replaying bool  // records are applied, not written
	err       error // the first write that failed; every later call fails with it
}

// record is one line of the journal: exactly one field is set.
type record struct {
	T *topicRecord `json:"t,omitempty"`
	G *groupRecord `json:"g,omitempty"`
	S *subRecord   `json:"s,omitempty"`
	M *msgRecord   `json:"m,omitempty"`
	E *entryRecord `json:"e,omitempty"`
}

type topicRecord struct {
	Name string              `json:"name"`
	Type catalog.MessageType `json:"type"`
}

type groupRecord struct {
	Name        string `json:"name"`
	MaxAttempts int    `json:"max_attempts"`
	Orderly     bool   `json:"orderly,omitempty"`
}

type subRecord struct {
	Group  string `json:"group"`
	Topic  string `json:"topic"`
	Filter string `json:"filter"`
}

// msgRecord is a message appended to its topic: to the topic's log and to
// every subscription of it. A rewrite marks messages the log no longer
// holds (NotLogged) and names the groups that still have them pending
// (Pending), which then are the only ones that get them.
type msgRecord struct {
	Topic     string     `json:"topic"`
	ID        string     `json:"id"`
	BornAt    time.Time  `json:"born_at"`
	Queue     int        `json:"queue,omitempty"`
	Carried   int        `json:"carried,omitempty"`
	Msg       mq.Message `json:"msg"`
	Rewrite   bool       `json:"rewrite,omitempty"`
	NotLogged bool       `json:"not_logged,omitempty"`
	Pending   []string   `json:"pending,omitempty"`
}

// entryRecord is the state of one message for one group.
type entryRecord struct {
	Group     string    `json:"group"`
	Topic     string    `json:"topic"`
	ID        string    `json:"id"`
	Attempts  int       `json:"attempts"`
	VisibleAt time.Time `json:"visible_at"`
	Held      bool      `json:"held,omitempty"`
	Settled   bool      `json:"settled,omitempty"`
}

// Open returns a broker whose messages and their state for each group
// (attempts, invisibility, settlement, dead letters) are kept in the file
// at path, created if missing, so that they outlive the process: a
// message Send accepted, an Ack, a ChangeInvisibleDuration is written
// before the call returns. Every other behaviour is the one of [New].
//
// Opened again after the process died (kill -9 included), the broker holds
// what it held then, with one difference: a message a consumer was
// handling (received, neither settled nor given a new invisible duration)
// is visible at once, with its delivery counted, since its consumer ended
// with the process; one handed back with ChangeInvisibleDuration returns
// at its time, and FIFO queues keep their order. Writes are not synced to
// the disk (as RocketMQ's default asynchronous flush): they survive the
// process, not the machine. A last line the process died while writing
// is dropped; its call had not returned. Open rewrites the file compactly,
// and so does the broker when it grows.
func Open(path string, opts *Opts) (*Broker, error) {
	b := New(opts)
	b.j = &journal{path: path, replaying: true}
	if err := b.replay(path); err != nil {
		return nil, err
	}
	b.j.replaying = false
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()
	for _, g := range b.groups {
		for _, sub := range g.subs {
			for _, e := range sub.entries {
				if e.held && !e.settled {
					e.visibleAt, e.held, e.token = now, false, 0
				}
			}
		}
	}
	if err := b.rewriteLocked(); err != nil {
		return nil, err
	}
	return b, nil
}

// Close writes what is pending and closes the journal; a broker made with
// [New] has none. The broker must not be used afterwards.
func (b *Broker) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.j == nil || b.j.f == nil {
		return nil
	}
	err := b.flushLocked()
	err = errors.Join(err, b.j.f.Close())
	b.j.f = nil
	b.j.err = errors.New("memmq: broker closed")
	return err
}

// journalLocked queues rec for the journal.
func (b *Broker) journalLocked(rec record) {
	if b.j == nil || b.j.replaying {
		return
	}
	line, err := json.Marshal(rec)
	if err != nil {
		b.j.err = fmt.Errorf("memmq: encode journal record: %w", err)
		return
	}
	b.j.pending.Write(line)
	b.j.pending.WriteByte('\n')
}

// journalEntryLocked queues e's state for the journal.
func (b *Broker) journalEntryLocked(sub *subscription, e *entry) {
	if b.j == nil || b.j.replaying {
		return
	}
	b.journalLocked(record{E: &entryRecord{Group: sub.group.name, Topic: sub.topic.name, ID: e.msg.id,
		Attempts: e.attempts, VisibleAt: e.visibleAt, Held: e.held, Settled: e.settled}})
}

// flushLocked writes the current call's records. It is called before every
// call that changed something returns.
func (b *Broker) flushLocked() error {
	j := b.j
	if j == nil || j.replaying {
		return nil
	}
	if j.err != nil {
		return j.err
	}
	if j.pending.Len() == 0 {
		return nil
	}
	n, err := j.f.Write(j.pending.Bytes())
	j.size += int64(n)
	j.pending.Reset()
	if err != nil {
		j.err = fmt.Errorf("memmq: write journal %s: %w", j.path, err)
		return j.err
	}
	if j.size >= j.compactAt {
		return b.rewriteLocked()
	}
	return nil
}

// flushLogged is flushLocked for calls that return no error; a failure
// stays in the journal and fails every later call.
func (b *Broker) flushLogged() { _ = b.flushLocked() }

// replay applies the records of the journal at path, if there is one.
func (b *Broker) replay(path string) error {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("memmq: open journal: %w", err)
	}
	defer f.Close()
	r := bufio.NewReaderSize(f, 1<<20)
	entries := map[*subscription]map[string]*entry{}
	for {
		line, err := r.ReadBytes('\n')
		if errors.Is(err, io.EOF) {
			return nil // a last line without its newline was being written
		}
		if err != nil {
			return fmt.Errorf("memmq: read journal %s: %w", path, err)
		}
		var rec record
		if err := json.Unmarshal(line, &rec); err != nil {
			return fmt.Errorf("memmq: journal %s has a bad record: %w", path, err)
		}
		b.applyLocked(rec, entries)
	}
}

// applyLocked replays one record. entries indexes each subscription's
// entries by message id as they are made.
func (b *Broker) applyLocked(rec record, entries map[*subscription]map[string]*entry) {
	index := func(sub *subscription, e *entry) {
		if entries[sub] == nil {
			entries[sub] = map[string]*entry{}
		}
		entries[sub][e.msg.id] = e
	}
	switch {
	case rec.T != nil:
		b.createTopicLocked(rec.T.Name, rec.T.Type)
	case rec.G != nil:
		b.createGroupLocked(GroupConfig{Name: rec.G.Name, MaxDeliveryAttempts: rec.G.MaxAttempts, Orderly: rec.G.Orderly})
	case rec.S != nil:
		g, t := b.groups[rec.S.Group], b.topics[rec.S.Topic]
		if g == nil || t == nil {
			return
		}
		sub := b.subscribeLocked(g, t, rec.S.Filter)
		for _, e := range sub.entries {
			index(sub, e)
		}
	case rec.M != nil:
		t := b.topics[rec.M.Topic]
		if t == nil {
			return
		}
		m := rec.M
		if m.Msg.DeliveryTime.IsZero() {
			m.Msg.DeliveryTime = time.Time{} // as sent, not JSON's UTC zero
		}
		s := &stored{msg: m.Msg, id: m.ID, bornAt: m.BornAt, queue: m.Queue, carried: m.Carried}
		if !m.Rewrite {
			b.appendLocked(t, s)
		} else {
			s.pos = t.next
			t.next++
			if !m.NotLogged {
				t.log = append(t.log, s)
			}
			for _, sub := range t.subs {
				if slices.Contains(m.Pending, sub.group.name) {
					sub.entries = append(sub.entries, newEntry(s))
				}
			}
		}
		for _, sub := range t.subs {
			if n := len(sub.entries); n > 0 && sub.entries[n-1].msg == s {
				index(sub, sub.entries[n-1])
			}
		}
	case rec.E != nil:
		g := b.groups[rec.E.Group]
		if g == nil || g.subs[rec.E.Topic] == nil {
			return
		}
		sub := g.subs[rec.E.Topic]
		e := entries[sub][rec.E.ID]
		if e == nil {
			return
		}
		e.attempts, e.visibleAt, e.held, e.settled = rec.E.Attempts, rec.E.VisibleAt, rec.E.Held, rec.E.Settled
		if e.settled {
			delete(entries[sub], rec.E.ID)
		} else if e.attempts > e.msg.carried {
			// Delivered before: in flight until visibleAt, which is what
			// keeps an orderly group's FIFO queue blocked behind it. No
			// handle of the dead process matches a new token.
			b.tokens++
			e.token = b.tokens
		}
	}
}
