package replay

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/aivedio/pipeline/shared/catalog"
	"github.com/aivedio/pipeline/shared/envelope"
	"github.com/aivedio/pipeline/shared/quarantine"
)

// destination finds where the replay goes: the original event's outbox
// row when it is still there, else the topic the message came from, else
// the consumer group's subscription that carries its tag.
func destination(ctx context.Context, q querier, r quarantine.Message, env envelope.Envelope, g catalog.Group) (Destination, catalog.Topic, error) {
	d := Destination{Tag: r.Tag}
	if d.Tag == "" {
		d.Tag = env.EventType
	}
	var topic catalog.Topic
	var name, tag, group string
	err := q.QueryRow(ctx, `SELECT topic, tag, coalesce(message_group, '') FROM outbox_events WHERE event_id = $1`, env.EventID).
		Scan(&name, &tag, &group)
	switch {
	case err == nil:
		if t, ok := catalog.TopicByName(name); ok && g.Takes(t, tag) {
			topic, d.Tag, d.MessageGroup, d.From = t, tag, group, "outbox"
		}
	case !errors.Is(err, pgx.ErrNoRows):
		return Destination{}, catalog.Topic{}, fmt.Errorf("read original outbox row: %w", err)
	}
	if d.From == "" {
		if t, ok := catalog.TopicByName(r.Topic); ok && g.Takes(t, d.Tag) {
			topic, d.From = t, "quarantine"
		}
	}
	if d.From == "" {
		// A dead letter was read from %DLQ%<group>: take the group's
		// subscription that carries the tag, an immediate topic first.
		for _, s := range g.Subscriptions {
			if g.Takes(s.Topic, d.Tag) && (d.From == "" || topic.Type == catalog.Delay) {
				topic, d.From = s.Topic, "catalog"
			}
		}
	}
	if d.From == "" {
		return Destination{}, catalog.Topic{}, fmt.Errorf("no topic of %s carries tag %q", g.Name, d.Tag)
	}
	d.Topic = topic.Name
	d.Delayed = topic.Type == catalog.Delay
	if topic.Type == catalog.FIFO && d.MessageGroup == "" {
		d.MessageGroup = env.AggregateID // docs/design.md §2: the group is the aggregate id
	}
	if topic.Type != catalog.FIFO {
		d.MessageGroup = ""
	}
	for _, other := range catalog.Groups() {
		if other.Name != g.Name && other.Takes(topic, d.Tag) {
			d.AlsoConsumedBy = append(d.AlsoConsumedBy, other.Name)
		}
	}
	return d, topic, nil
}
