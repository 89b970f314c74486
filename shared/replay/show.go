package replay

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/aivedio/pipeline/shared/catalog"
	"github.com/aivedio/pipeline/shared/envelope"
	"github.com/aivedio/pipeline/shared/quarantine"
)

// MessageDetail is one quarantined message whole, as [Desk.Show] returns it.
type MessageDetail struct {
	quarantine.Message
	Properties map[string]string `json:"properties"`
	// Body is the message body as text when it is UTF-8, else base64.
	Body         string             `json:"body"`
	BodyEncoding string             `json:"body_encoding"` // "utf-8" or "base64"
	Event        *envelope.Envelope `json:"event,omitempty"`
	EventError   string             `json:"event_error,omitempty"`
	// Replays are the replays planned for this event and consumer.
	Replays []Replay `json:"replays"`
}

// Show returns one quarantined message whole: its properties, its body,
// the event it carries, and the replays planned for it.
func (desk *Desk) Show(ctx context.Context, quarantineID uuid.UUID) (MessageDetail, error) {
	r, err := readRow(ctx, desk.db, quarantineID)
	if err != nil {
		return MessageDetail{}, err
	}
	q := MessageDetail{Message: r.Message, Properties: r.Properties}
	if utf8.Valid(r.Body) {
		q.Body, q.BodyEncoding = string(r.Body), "utf-8"
	} else {
		q.Body, q.BodyEncoding = base64.StdEncoding.EncodeToString(r.Body), "base64"
	}
	if env, err := decodeEnvelope(r.Properties, r.Body); err != nil {
		q.EventError = err.Error()
	} else {
		q.Event = &env
	}
	q.Replays, err = replaysOf(ctx, desk.db, r.Message)
	if err != nil {
		return MessageDetail{}, err
	}
	return q, nil
}

// readRow reads a quarantine row whole, under this package's [ErrNotFound].
func readRow(ctx context.Context, q querier, id uuid.UUID) (quarantine.Stored, error) {
	r, err := quarantine.Read(ctx, q, id)
	if errors.Is(err, quarantine.ErrNotFound) {
		return r, fmt.Errorf("%w: no quarantined message %s", ErrNotFound, id)
	}
	return r, err
}

// groupOf finds the catalog group of a quarantine row's consumer.
func groupOf(consumer string) (catalog.Group, bool) {
	g, err := catalog.GroupByName(consumer)
	return g, err == nil && g.Name == consumer
}
