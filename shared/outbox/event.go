package outbox

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/aivedio/pipeline/shared/catalog"
	"github.com/aivedio/pipeline/shared/envelope"
)

// MaxDelay is the longest DeliverAt may lie ahead of the time [Write] runs:
// the RocketMQ 5 proxy refuses a delivery timestamp more than one day ahead.
// The relay sends later than Write runs, so it stays within the limit.
const MaxDelay = 24 * time.Hour

// maxTagLen keeps a tag within what RocketMQ stores as a message property.
const maxTagLen = 128

// ErrInvalidEvent matches every error [Write] returns for an event that breaks
// a rule (see the package documentation). Nothing was written; the
// transaction is still usable.
var ErrInvalidEvent = errors.New("invalid outbox event")

// Event is one event to publish: its envelope and where the broker should put
// it.
type Event struct {
	Envelope envelope.Envelope
	// Topic is the physical topic, one of [catalog.Topics]. It is stored by its
	// firm name; the relay maps it to [catalog.Topic.BrokerName].
	Topic catalog.Topic
	// Tag is the broker tag consumer groups filter on; empty means the event
	// type.
	Tag string
	// MessageGroup orders messages on a FIFO topic: required there and
	// forbidden elsewhere. By docs/design.md §2 it is the aggregate id.
	MessageGroup string
	// DeliverAt is when the broker delivers a message on a DELAY topic:
	// required there (at most [MaxDelay] ahead) and zero elsewhere.
	DeliverAt time.Time
}

// catalogTopics indexes the catalog by firm topic name.
var catalogTopics = func() map[string]catalog.Topic {
	m := make(map[string]catalog.Topic)
	for _, t := range catalog.Topics() {
		m[t.Name] = t
	}
	return m
}()

// row is an event checked and converted for insertion.
type row struct {
	eventID  uuid.UUID
	tenantID uuid.UUID
	tag      string
}

// check validates e, the i-th event of a Write call, against now.
func (e Event) check(i int, now time.Time) (row, error) {
	env := e.Envelope
	if err := env.Validate(); err != nil {
		return row{}, fmt.Errorf("%w %s: %w", ErrInvalidEvent, label(i, env.EventID), err)
	}
	fail := func(format string, args ...any) (row, error) {
		return row{}, fmt.Errorf("%w %s: %s", ErrInvalidEvent, label(i, env.EventID), fmt.Sprintf(format, args...))
	}
	eventID := uuid.MustParse(env.EventID) // Validate checked it is a canonical UUID.
	tenantID, err := uuid.Parse(env.TenantID)
	if err != nil || tenantID.String() != env.TenantID {
		return fail("tenant_id %s is not a lower-case canonical UUID (outbox_events.tenant_id is a uuid column)", strconv.Quote(env.TenantID))
	}

	known, ok := catalogTopics[e.Topic.Name]
	switch {
	case e.Topic.Name == "":
		return fail("topic is required")
	case !ok:
		return fail("topic %q is not in the catalog", e.Topic.Name)
	case known.Type != e.Topic.Type:
		return fail("topic %q is %s in the catalog, not %q", e.Topic.Name, known.Type, e.Topic.Type)
	}

	switch {
	case known.Type == catalog.FIFO && e.MessageGroup == "":
		return fail("message_group is required on FIFO topic %q (docs/design.md §2: the aggregate id)", known.Name)
	case known.Type != catalog.FIFO && e.MessageGroup != "":
		return fail("message_group is set but topic %q is %s; only FIFO topics take one", known.Name, known.Type)
	}

	switch {
	case known.Type == catalog.Delay && e.DeliverAt.IsZero():
		return fail("deliver_at is required on DELAY topic %q", known.Name)
	case known.Type == catalog.Delay && e.DeliverAt.Sub(now) > MaxDelay:
		return fail("deliver_at %s is %s ahead, beyond the broker's maximum delay of %s",
			e.DeliverAt.UTC().Format(time.RFC3339), e.DeliverAt.Sub(now).Round(time.Second), MaxDelay)
	case known.Type != catalog.Delay && !e.DeliverAt.IsZero():
		return fail("deliver_at is set but topic %q is %s; only DELAY topics take one", known.Name, known.Type)
	}

	tag := e.Tag
	if tag == "" {
		tag = env.EventType
	}
	if !isTag(tag) {
		return fail("tag %s is not 1-%d printable ASCII characters without space or '|'", strconv.Quote(tag), maxTagLen)
	}
	return row{eventID: eventID, tenantID: tenantID, tag: tag}, nil
}

// label names the i-th event of a call in an error: its id and its index, so
// a caller writing several events can tell which one failed.
func label(i int, eventID string) string {
	if eventID == "" {
		return fmt.Sprintf("events[%d]", i)
	}
	return fmt.Sprintf("%s (events[%d])", strconv.Quote(eventID), i)
}

func isTag(s string) bool {
	if s == "" || len(s) > maxTagLen {
		return false
	}
	return strings.IndexFunc(s, func(r rune) bool { return r <= ' ' || r > '~' || r == '|' }) < 0
}
