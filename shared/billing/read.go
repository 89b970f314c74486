package billing

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/aivedio/pipeline/shared/pg"
)

// Reservation is a task's credit_reservations row.
type Reservation struct {
	ReservationID uuid.UUID  `json:"reservation_id"`
	Amount        int64      `json:"amount"`
	Status        string     `json:"status"` // Held, Captured or Released
	CreatedAt     time.Time  `json:"created_at"`
	SettledAt     *time.Time `json:"settled_at,omitempty"`
}

// LedgerEntry is a credit_ledger row.
type LedgerEntry struct {
	EntryID      uuid.UUID `json:"entry_id"`
	Type         string    `json:"ledger_business_type"`
	BusinessID   string    `json:"business_id"`
	Amount       int64     `json:"amount"`
	BalanceAfter int64     `json:"balance_after"`
	CreatedAt    time.Time `json:"created_at"`
}

// OfTask reads what billing holds about a task of tenantID: its
// reservation (nil when it has none) and the ledger rows keyed by the
// task or by its reservation (a capture), oldest first.
func OfTask(ctx context.Context, q pg.Querier, tenantID, taskID uuid.UUID) (*Reservation, []LedgerEntry, error) {
	var res *Reservation
	var r Reservation
	err := q.QueryRow(ctx, `SELECT reservation_id, amount, status, created_at, settled_at FROM credit_reservations WHERE task_id = $1`, taskID).
		Scan(&r.ReservationID, &r.Amount, &r.Status, &r.CreatedAt, &r.SettledAt)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
	case err != nil:
		return nil, nil, fmt.Errorf("read reservation of task %s: %w", taskID, err)
	default:
		r.CreatedAt, r.SettledAt = r.CreatedAt.UTC(), pg.UTC(r.SettledAt)
		res = &r
	}
	keys := []string{taskID.String()}
	if res != nil {
		keys = append(keys, res.ReservationID.String())
	}
	rows, err := q.Query(ctx, `SELECT entry_id, ledger_business_type, business_id, amount, balance_after, created_at
		FROM credit_ledger WHERE tenant_id = $1 AND business_id = ANY($2::text[]) ORDER BY created_at, entry_id`, tenantID, keys)
	if err != nil {
		return nil, nil, fmt.Errorf("read ledger of task %s: %w", taskID, err)
	}
	ledger, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (LedgerEntry, error) {
		var l LedgerEntry
		err := r.Scan(&l.EntryID, &l.Type, &l.BusinessID, &l.Amount, &l.BalanceAfter, &l.CreatedAt)
		l.CreatedAt = l.CreatedAt.UTC()
		return l, err
	})
	if err != nil {
		return nil, nil, fmt.Errorf("read ledger of task %s: %w", taskID, err)
	}
	return res, ledger, nil
}
