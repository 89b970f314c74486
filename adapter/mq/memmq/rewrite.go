package memmq

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
)

// rewriteLocked replaces the journal with the shortest one that replays to
// the broker's current state: topics, groups, subscriptions, the messages
// a topic's log or a group still holds, and the entries that are not as
// new. It writes a new file and renames it over the old one, so a process
// that dies meanwhile leaves one or the other.
func (b *Broker) rewriteLocked() error {
	j := b.j
	var buf bytes.Buffer
	write := func(rec record) error {
		line, err := json.Marshal(rec)
		if err != nil {
			return fmt.Errorf("memmq: encode journal record: %w", err)
		}
		buf.Write(line)
		buf.WriteByte('\n')
		return nil
	}
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(b.topics)) {
		errs = append(errs, write(record{T: &topicRecord{Name: name, Type: b.topics[name].typ}}))
	}
	for _, name := range slices.Sorted(maps.Keys(b.groups)) {
		g := b.groups[name]
		errs = append(errs, write(record{G: &groupRecord{Name: name, MaxAttempts: g.maxAttempts, Orderly: g.orderly}}))
		for _, topic := range slices.Sorted(maps.Keys(g.subs)) {
			errs = append(errs, write(record{S: &subRecord{Group: name, Topic: topic, Filter: g.subs[topic].expr}}))
		}
	}
	for _, name := range slices.Sorted(maps.Keys(b.topics)) {
		errs = append(errs, b.rewriteTopic(b.topics[name], write))
	}
	if err := errors.Join(errs...); err != nil {
		j.err = err
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(j.path), filepath.Base(j.path)+".rewrite-*")
	if err == nil {
		_, err = tmp.Write(buf.Bytes())
		err = errors.Join(err, tmp.Close())
		if err == nil {
			err = os.Rename(tmp.Name(), j.path)
		}
		if err != nil {
			_ = os.Remove(tmp.Name())
		}
	}
	var f *os.File
	if err == nil {
		f, err = os.OpenFile(j.path, os.O_WRONLY|os.O_APPEND, 0o644)
	}
	if err != nil {
		j.err = fmt.Errorf("memmq: rewrite journal %s: %w", j.path, err)
		return j.err
	}
	if j.f != nil {
		_ = j.f.Close()
	}
	j.f, j.size = f, int64(buf.Len())
	j.compactAt = max(compactAtLeast, 4*j.size)
	return nil
}

// rewriteTopic writes the messages of t that its log or a group holds, in
// the order they were appended, and the entries whose state moved on.
func (b *Broker) rewriteTopic(t *topic, write func(record) error) error {
	msgs := map[uint64]*stored{}
	logged := map[uint64]bool{}
	for _, s := range t.log {
		msgs[s.pos], logged[s.pos] = s, true
	}
	pending := map[uint64][]string{}
	for _, sub := range t.subs {
		for _, e := range sub.entries {
			if !e.settled {
				msgs[e.msg.pos] = e.msg
				pending[e.msg.pos] = append(pending[e.msg.pos], sub.group.name)
			}
		}
	}
	var errs []error
	for _, pos := range slices.Sorted(maps.Keys(msgs)) {
		s := msgs[pos]
		errs = append(errs, write(record{M: &msgRecord{Topic: t.name, ID: s.id, BornAt: s.bornAt, Queue: s.queue, Carried: s.carried,
			Msg: s.msg, Rewrite: true, NotLogged: !logged[pos], Pending: pending[pos]}}))
	}
	for _, sub := range t.subs {
		for _, e := range sub.entries {
			if fresh := newEntry(e.msg); e.settled || (e.attempts == fresh.attempts && e.visibleAt.Equal(fresh.visibleAt) && !e.held) {
				continue
			}
			errs = append(errs, write(record{E: &entryRecord{Group: sub.group.name, Topic: t.name, ID: e.msg.id,
				Attempts: e.attempts, VisibleAt: e.visibleAt, Held: e.held}}))
		}
	}
	return errors.Join(errs...)
}
