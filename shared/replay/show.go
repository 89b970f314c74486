package replay

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"

	"github.com/aivedio/pipeline/shared/quarantine"
)

// MessageDetail is one quarantined message whole, as [Desk.Show] returns it.
type MessageDetail struct {
	quarantine.Detail
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
	replays, err := replaysOf(ctx, desk.db, r.Message)
	if err != nil {
		return MessageDetail{}, err
	}
	return MessageDetail{Detail: r.Detail(), Replays: replays}, nil
}

// readRow reads a quarantine row whole, under this package's [ErrNotFound].
func readRow(ctx context.Context, q querier, id uuid.UUID) (quarantine.Stored, error) {
	r, err := quarantine.Read(ctx, q, id)
	if errors.Is(err, quarantine.ErrNotFound) {
		return r, fmt.Errorf("%w: no quarantined message %s", ErrNotFound, id)
	}
	return r, err
}
