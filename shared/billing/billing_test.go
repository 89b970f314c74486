package billing_test

import (
	"crypto/sha256"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/shared/billing"
	"github.com/aivedio/pipeline/shared/dbtest"
	"github.com/aivedio/pipeline/shared/task"
	"github.com/aivedio/pipeline/shared/tenant"
)

type testBundle struct {
	pool     *pgxpool.Pool
	tenantID uuid.UUID
}

func setup(t *testing.T, credits int64) *testBundle {
	t.Helper()
	b := &testBundle{pool: dbtest.TestSchema(t)}
	b.tx(t, func(tx pgx.Tx) error {
		c, err := tenant.Create(t.Context(), tx, tenant.NewTenant{Name: "acme", Credits: credits}, tenant.RoleTenant)
		b.tenantID = c.TenantID
		return err
	})
	return b
}

func (b *testBundle) tx(t *testing.T, fn func(tx pgx.Tx) error) {
	t.Helper()
	require.NoError(t, pgx.BeginFunc(t.Context(), b.pool, fn))
}

// reservedTask creates a task holding a reservation of amount.
func (b *testBundle) reservedTask(t *testing.T, amount int64) uuid.UUID {
	t.Helper()
	var id uuid.UUID
	b.tx(t, func(tx pgx.Tx) error {
		hash := sha256.Sum256([]byte("p"))
		created, _, err := task.Create(t.Context(), tx, task.Origin{Producer: "api"}, task.New{TenantID: b.tenantID,
			IdempotencyKey: uuid.NewString(), RequestHash: hash[:], Model: "m", Prompt: "p", DurationSeconds: 1, Resolution: "640x360"})
		if err != nil {
			return err
		}
		id = created.ID
		return billing.Reserve(t.Context(), tx, b.tenantID, id, amount)
	})
	return id
}

func (b *testBundle) account(t *testing.T) billing.Account {
	t.Helper()
	a, err := billing.GetAccount(t.Context(), b.pool, b.tenantID)
	require.NoError(t, err)
	return a
}

func TestReserveRefusesWhatTheBalanceCannotCover(t *testing.T) {
	t.Parallel()
	b := setup(t, 100)
	b.reservedTask(t, 60)
	require.Equal(t, billing.Account{TenantID: b.tenantID, Balance: 100, Reserved: 60}, b.account(t))

	err := pgx.BeginFunc(t.Context(), b.pool, func(tx pgx.Tx) error {
		return billing.Reserve(t.Context(), tx, b.tenantID, uuid.New(), 41)
	})
	require.ErrorIs(t, err, billing.ErrInsufficientCredits)
	require.EqualValues(t, 40, b.account(t).Available())
}

func TestCaptureChargesOnceHoweverOftenItIsRepeated(t *testing.T) {
	t.Parallel()
	b := setup(t, 100)
	taskID := b.reservedTask(t, 30)
	for i := range 3 {
		b.tx(t, func(tx pgx.Tx) error {
			s, err := billing.Capture(t.Context(), tx, taskID)
			require.NoError(t, err)
			require.Equal(t, i == 0, s.Changed)
			require.Equal(t, billing.Captured, s.Status)
			return nil
		})
	}
	require.Equal(t, billing.Account{TenantID: b.tenantID, Balance: 70, Reserved: 0}, b.account(t))
	var entries int
	require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT count(*) FROM credit_ledger WHERE ledger_business_type = 'CAPTURE'`).Scan(&entries))
	require.Equal(t, 1, entries)

	// A late release after the capture changes nothing either.
	b.tx(t, func(tx pgx.Tx) error {
		s, err := billing.Release(t.Context(), tx, taskID)
		require.NoError(t, err)
		require.False(t, s.Changed)
		require.Equal(t, billing.Captured, s.Status)
		return nil
	})
	require.Equal(t, billing.Account{TenantID: b.tenantID, Balance: 70, Reserved: 0}, b.account(t))
}

func TestReleaseFreesWithoutCharging(t *testing.T) {
	t.Parallel()
	b := setup(t, 100)
	taskID := b.reservedTask(t, 30)
	b.tx(t, func(tx pgx.Tx) error {
		s, err := billing.Release(t.Context(), tx, taskID)
		require.NoError(t, err)
		require.True(t, s.Changed)
		return nil
	})
	require.Equal(t, billing.Account{TenantID: b.tenantID, Balance: 100, Reserved: 0}, b.account(t))
	err := pgx.BeginFunc(t.Context(), b.pool, func(tx pgx.Tx) error {
		_, err := billing.Capture(t.Context(), tx, uuid.New())
		return err
	})
	require.ErrorIs(t, err, billing.ErrNoReservation)
}

func TestTopUpOncePerBusinessID(t *testing.T) {
	t.Parallel()
	b := setup(t, 0)
	for i := range 2 {
		b.tx(t, func(tx pgx.Tx) error {
			added, err := billing.TopUp(t.Context(), tx, b.tenantID, 25, "payment-1")
			require.NoError(t, err)
			require.Equal(t, i == 0, added)
			return nil
		})
	}
	require.EqualValues(t, 25, b.account(t).Balance)
}

func TestPrice(t *testing.T) {
	t.Parallel()
	p := billing.Price{PerSecond: map[string]int64{"hd": 25}, DefaultPerSecond: 10}
	require.EqualValues(t, 100, p.Of("hd", 4))
	require.EqualValues(t, 40, p.Of("other", 4))
}

func TestOfTaskReadsTheReservationAndItsLedger(t *testing.T) {
	t.Parallel()
	b := setup(t, 100)
	id := b.reservedTask(t, 40)
	res, ledger, err := billing.OfTask(t.Context(), b.pool, b.tenantID, id)
	require.NoError(t, err)
	require.NotNil(t, res)
	require.Equal(t, billing.Held, res.Status)
	require.EqualValues(t, 40, res.Amount)
	require.Nil(t, res.SettledAt)
	require.Empty(t, ledger)

	b.tx(t, func(tx pgx.Tx) error { _, err := billing.Capture(t.Context(), tx, id); return err })
	res, ledger, err = billing.OfTask(t.Context(), b.pool, b.tenantID, id)
	require.NoError(t, err)
	require.Equal(t, billing.Captured, res.Status)
	require.NotNil(t, res.SettledAt)
	require.Len(t, ledger, 1)
	require.Equal(t, res.ReservationID.String(), ledger[0].BusinessID, "a capture is keyed by the reservation")

	res, ledger, err = billing.OfTask(t.Context(), b.pool, b.tenantID, uuid.New())
	require.NoError(t, err)
	require.Nil(t, res)
	require.Empty(t, ledger)
}
