package inbox

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/aivedio/pipeline/shared/pg"
)

// Record is an inbox_dedup row: a consumer committed the event.
type Record struct {
	Consumer    string    `json:"consumer"`
	EventID     string    `json:"event_id"`
	Result      Result    `json:"result"`
	ProcessedAt time.Time `json:"processed_at"`
}

// Lookup reads consumer's row for the event; nil when the consumer never
// committed it.
func Lookup(ctx context.Context, q pg.Querier, consumer string, eventID uuid.UUID) (*Record, error) {
	rec := Record{Consumer: consumer, EventID: eventID.String()}
	err := q.QueryRow(ctx, `SELECT result_code, processed_at FROM inbox_dedup WHERE consumer_name = $1 AND event_id = $2`,
		consumer, eventID).Scan(&rec.Result, &rec.ProcessedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read inbox of %s: %w", consumer, err)
	}
	rec.ProcessedAt = rec.ProcessedAt.UTC()
	return &rec, nil
}
