// Package billing holds credits (docs/design.md §4): a tenant's account, one
// reservation per generation task or render, and the append-only ledger.
//
// # Guarantees
//
// Every function works inside the caller's transaction, so a reservation is
// made with the task it pays for and settled with the transition that ends
// it. Settling is idempotent twice over: a reservation leaves HELD exactly
// once (a conditional update), and the ledger's
// UNIQUE(ledger_business_type, business_id) refuses a second entry for the
// same fact. A repeated settle message changes nothing.
//
// Amounts are integers in the smallest billing unit.
package billing

import (
	"context"
	"errors"
	"fmt"
	"github.com/aivedio/pipeline/shared/pg"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// Ledger business types: with the business id, the key of a ledger entry.
const (
	EntryTopUp   = "TOP_UP"
	EntryCapture = "CAPTURE"
)

// ErrInsufficientCredits: the account's free balance is below the amount.
var ErrInsufficientCredits = errors.New("insufficient credits")

// ErrNoReservation: the task (or render) holds no reservation.
var ErrNoReservation = errors.New("no reservation for")

// Reservation states.
const (
	Held     = "HELD"
	Captured = "CAPTURED"
	Released = "RELEASED"
)

// Price is what a generation costs: per second of video, by model. A
// model without a price of its own costs the default.
type Price struct {
	PerSecond        map[string]int64
	DefaultPerSecond int64
}

// DefaultPrice is the price list used when none is configured.
var DefaultPrice = Price{DefaultPerSecond: 10}

// Of is the price of durationSeconds of model.
func (p Price) Of(model string, durationSeconds int) int64 {
	per, ok := p.PerSecond[model]
	if !ok {
		per = p.DefaultPerSecond
	}
	return per * int64(durationSeconds)
}

// RenderPrice is what a render costs: per started second of output, by
// profile. A profile without a price of its own costs the default.
type RenderPrice struct {
	PerSecond        map[string]int64
	DefaultPerSecond int64
}

// DefaultRenderPrice is the render price list used when none is
// configured: 720p costs half of 1080p.
var DefaultRenderPrice = RenderPrice{PerSecond: map[string]int64{"720p30-h264": 1}, DefaultPerSecond: 2}

// Of is the price of rendering durationUS microseconds of output in
// profile; a started second counts whole.
func (p RenderPrice) Of(profile string, durationUS int64) int64 {
	per, ok := p.PerSecond[profile]
	if !ok {
		per = p.DefaultPerSecond
	}
	return per * ((durationUS + 999_999) / 1_000_000)
}

// Account is a tenant's credits.
type Account struct {
	TenantID uuid.UUID
	Balance  int64
	Reserved int64
}

// Available is what new reservations may still take.
func (a Account) Available() int64 { return a.Balance - a.Reserved }

// GetAccount reads a tenant's account.
func GetAccount(ctx context.Context, q pg.Querier, tenantID uuid.UUID) (Account, error) {
	a := Account{TenantID: tenantID}
	err := q.QueryRow(ctx, `SELECT balance, reserved FROM credit_accounts WHERE tenant_id = $1`, tenantID).Scan(&a.Balance, &a.Reserved)
	if errors.Is(err, pgx.ErrNoRows) {
		return a, nil
	}
	if err != nil {
		return Account{}, fmt.Errorf("read credit account: %w", err)
	}
	return a, nil
}

// TopUp adds amount to the tenant's balance, once per businessID (a
// payment id, for instance): a repeat returns added false.
func TopUp(ctx context.Context, tx pgx.Tx, tenantID uuid.UUID, amount int64, businessID string) (added bool, err error) {
	if amount <= 0 {
		return false, fmt.Errorf("top up amount must be positive, got %d", amount)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO credit_accounts (tenant_id) VALUES ($1) ON CONFLICT DO NOTHING`, tenantID); err != nil {
		return false, fmt.Errorf("open credit account: %w", err)
	}
	// The row lock orders concurrent top-ups, so each entry's balance_after
	// is the balance it actually produced.
	var balance int64
	if err := tx.QueryRow(ctx, `SELECT balance FROM credit_accounts WHERE tenant_id = $1 FOR UPDATE`, tenantID).Scan(&balance); err != nil {
		return false, fmt.Errorf("lock credit account: %w", err)
	}
	tag, err := tx.Exec(ctx, `INSERT INTO credit_ledger (tenant_id, ledger_business_type, business_id, amount, balance_after)
		VALUES ($1, $2, $3, $4, $5) ON CONFLICT (ledger_business_type, business_id) DO NOTHING`,
		tenantID, EntryTopUp, businessID, amount, balance+amount)
	if err != nil {
		return false, fmt.Errorf("record top up: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return false, nil // this payment was credited before
	}
	if _, err := tx.Exec(ctx, `UPDATE credit_accounts SET balance = balance + $2, version = version + 1, updated_at = now()
		WHERE tenant_id = $1`, tenantID, amount); err != nil {
		return false, fmt.Errorf("top up: %w", err)
	}
	return true, nil
}

// Reserve holds amount of the tenant's credits for taskID. It fails with
// [ErrInsufficientCredits] (nothing written) when the free balance is short.
func Reserve(ctx context.Context, tx pgx.Tx, tenantID, taskID uuid.UUID, amount int64) error {
	return reserve(ctx, tx, tenantID, forTask(taskID), amount)
}

// ReserveRender holds amount of the tenant's credits for the render
// renderID, as [Reserve] does for a task.
func ReserveRender(ctx context.Context, tx pgx.Tx, tenantID, renderID uuid.UUID, amount int64) error {
	return reserve(ctx, tx, tenantID, forRender(renderID), amount)
}

// payer is what a reservation pays for: a generation task or a render,
// by the credit_reservations column that names it.
type payer struct {
	column string // task_id or render_job_id: never from input
	id     uuid.UUID
}

func forTask(id uuid.UUID) payer   { return payer{"task_id", id} }
func forRender(id uuid.UUID) payer { return payer{"render_job_id", id} }

func reserve(ctx context.Context, tx pgx.Tx, tenantID uuid.UUID, p payer, amount int64) error {
	if amount <= 0 {
		return fmt.Errorf("reservation amount must be positive, got %d", amount)
	}
	tag, err := tx.Exec(ctx, `UPDATE credit_accounts SET reserved = reserved + $2, version = version + 1, updated_at = now()
		WHERE tenant_id = $1 AND balance - reserved >= $2`, tenantID, amount)
	if err != nil {
		return fmt.Errorf("reserve credits: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return ErrInsufficientCredits
	}
	if _, err := tx.Exec(ctx, `INSERT INTO credit_reservations (`+p.column+`, tenant_id, amount) VALUES ($1, $2, $3)`, p.id, tenantID, amount); err != nil {
		return fmt.Errorf("record reservation: %w", err)
	}
	return nil
}

// Settlement is what settling did.
type Settlement struct {
	ReservationID uuid.UUID
	Amount        int64
	Status        string // the reservation's status after the call
	Changed       bool   // false: it was already settled, nothing written
}

// Capture charges the task's held reservation: the balance goes down by
// its amount, with a CAPTURE ledger entry keyed by the reservation. Already
// captured or released: nothing changes.
func Capture(ctx context.Context, tx pgx.Tx, taskID uuid.UUID) (Settlement, error) {
	return capture(ctx, tx, forTask(taskID))
}

// CaptureRender charges the render's held reservation, as [Capture] does
// a task's.
func CaptureRender(ctx context.Context, tx pgx.Tx, renderID uuid.UUID) (Settlement, error) {
	return capture(ctx, tx, forRender(renderID))
}

func capture(ctx context.Context, tx pgx.Tx, p payer) (Settlement, error) {
	s, err := settle(ctx, tx, p, Captured)
	if err != nil || !s.Changed {
		return s, err
	}
	var tenantID uuid.UUID
	var balance int64
	err = tx.QueryRow(ctx, `UPDATE credit_accounts a SET balance = balance - r.amount, reserved = reserved - r.amount,
			version = a.version + 1, updated_at = now()
		FROM credit_reservations r WHERE r.reservation_id = $1 AND a.tenant_id = r.tenant_id
		RETURNING a.tenant_id, a.balance`, s.ReservationID).Scan(&tenantID, &balance)
	if err != nil {
		return Settlement{}, fmt.Errorf("capture credits: %w", err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO credit_ledger (tenant_id, ledger_business_type, business_id, amount, balance_after)
		VALUES ($1, $2, $3, $4, $5)`, tenantID, EntryCapture, s.ReservationID.String(), -s.Amount, balance); err != nil {
		return Settlement{}, fmt.Errorf("record capture: %w", err)
	}
	return s, nil
}

// Release frees the task's held reservation without charging. Already
// captured or released: nothing changes.
func Release(ctx context.Context, tx pgx.Tx, taskID uuid.UUID) (Settlement, error) {
	return release(ctx, tx, forTask(taskID))
}

// ReleaseRender frees the render's held reservation, as [Release] does a
// task's.
func ReleaseRender(ctx context.Context, tx pgx.Tx, renderID uuid.UUID) (Settlement, error) {
	return release(ctx, tx, forRender(renderID))
}

func release(ctx context.Context, tx pgx.Tx, p payer) (Settlement, error) {
	s, err := settle(ctx, tx, p, Released)
	if err != nil || !s.Changed {
		return s, err
	}
	if _, err := tx.Exec(ctx, `UPDATE credit_accounts a SET reserved = reserved - r.amount, version = a.version + 1, updated_at = now()
		FROM credit_reservations r WHERE r.reservation_id = $1 AND a.tenant_id = r.tenant_id`, s.ReservationID); err != nil {
		return Settlement{}, fmt.Errorf("release credits: %w", err)
	}
	return s, nil
}

// settle moves p's reservation out of HELD to status, or reports how it
// was settled before.
func settle(ctx context.Context, tx pgx.Tx, p payer, status string) (Settlement, error) {
	var s Settlement
	err := tx.QueryRow(ctx, `UPDATE credit_reservations SET status = $2, settled_at = now()
		WHERE `+p.column+` = $1 AND status = 'HELD' RETURNING reservation_id, amount, status`, p.id, status).
		Scan(&s.ReservationID, &s.Amount, &s.Status)
	if err == nil {
		s.Changed = true
		return s, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return Settlement{}, fmt.Errorf("settle reservation: %w", err)
	}
	err = tx.QueryRow(ctx, `SELECT reservation_id, amount, status FROM credit_reservations WHERE `+p.column+` = $1`, p.id).
		Scan(&s.ReservationID, &s.Amount, &s.Status)
	if errors.Is(err, pgx.ErrNoRows) {
		return Settlement{}, fmt.Errorf("%w %s", ErrNoReservation, p.id)
	}
	if err != nil {
		return Settlement{}, fmt.Errorf("read reservation: %w", err)
	}
	return s, nil
}
