package replay

import (
	"cmp"
	"fmt"

	"github.com/aivedio/pipeline/shared/catalog"
	"github.com/aivedio/pipeline/shared/envelope"
	"github.com/aivedio/pipeline/shared/outbox"
	"github.com/aivedio/pipeline/shared/quarantine"
)

// destination finds where the replay goes: the original event's outbox
// row orig when it is still there, else the topic the message came from,
// else the consumer group's subscription that carries its tag.
func destination(r quarantine.Message, env envelope.Envelope, g catalog.Group, orig *outbox.Stored) (Destination, catalog.Topic, error) {
	d := Destination{Tag: cmp.Or(r.Tag, env.EventType)}
	var topic catalog.Topic
	if orig != nil && g.Takes(orig.Topic, orig.Tag) {
		topic, d.Tag, d.MessageGroup, d.From = orig.Topic, orig.Tag, orig.MessageGroup, "outbox"
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
