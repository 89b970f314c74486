package asset

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// Quota is how much a tenant may keep stored: assets that are not FAILED
// (uploads, generation outputs and their derivatives, renders), and their
// bytes. A tenant's own limits (tenants.max_assets, max_stored_bytes) take
// the place of the deployment's.
type Quota struct {
	MaxAssets int64
	MaxBytes  int64
}

// Usage is what a tenant keeps stored now.
type Usage struct {
	Assets int64
	Bytes  int64
}

// ErrQuotaExceeded is wrapped by a *QuotaError.
var ErrQuotaExceeded = errors.New("quota exceeded")

// QuotaError says which limit a create would pass.
type QuotaError struct {
	Limit string // "assets" or "stored bytes"
	Max   int64
	Used  int64
}

func (e *QuotaError) Error() string {
	return fmt.Sprintf("the tenant keeps %d %s, and its quota is %d", e.Used, e.Limit, e.Max)
}

func (e *QuotaError) Unwrap() error { return ErrQuotaExceeded }

// CheckQuota refuses a create that takes the tenant past its quota by
// adding. An upload checks after its row was inserted (inserted: the
// table holds adding already); a generation or a render before its output
// exists, as one asset of bytes not known yet, so none more once the
// tenant is at its byte quota. It takes the tenant's quota lock for the
// rest of tx before it reads, so of two creates at once the second sees
// the first's row: call it in the transaction that creates, and roll back
// on its error.
func CheckQuota(ctx context.Context, tx pgx.Tx, tenantID uuid.UUID, def Quota, adding Usage, inserted bool) error {
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended('aivedio.asset_quota:' || $1::text, 0))`, tenantID); err != nil {
		return fmt.Errorf("take the quota lock of tenant %s: %w", tenantID, err)
	}
	var q Quota
	var u Usage
	err := tx.QueryRow(ctx, `SELECT coalesce(t.max_assets, $2), coalesce(t.max_stored_bytes, $3), u.assets, u.bytes
		FROM tenants t, LATERAL (SELECT count(*) AS assets, coalesce(sum(size_bytes), 0)::bigint AS bytes
			FROM assets WHERE tenant_id = t.tenant_id AND status <> 'FAILED') u
		WHERE t.tenant_id = $1`, tenantID, def.MaxAssets, def.MaxBytes).Scan(&q.MaxAssets, &q.MaxBytes, &u.Assets, &u.Bytes)
	if err != nil {
		return fmt.Errorf("read the quota of tenant %s: %w", tenantID, err)
	}
	if inserted {
		u.Assets, u.Bytes = u.Assets-adding.Assets, u.Bytes-adding.Bytes
	}
	unknownBytes := adding.Assets > 0 && adding.Bytes == 0
	switch {
	case u.Assets+adding.Assets > q.MaxAssets:
		return &QuotaError{Limit: "assets", Max: q.MaxAssets, Used: u.Assets}
	case u.Bytes+adding.Bytes > q.MaxBytes || (unknownBytes && u.Bytes >= q.MaxBytes):
		return &QuotaError{Limit: "stored bytes", Max: q.MaxBytes, Used: u.Bytes}
	}
	return nil
}

// SetQuota sets a tenant's own limits: nil leaves one as it is, a
// negative value gives it back the deployment's default.
func SetQuota(ctx context.Context, tx pgx.Tx, tenantID uuid.UUID, maxAssets, maxBytes *int64) error {
	tag, err := tx.Exec(ctx, `UPDATE tenants SET
			max_assets = CASE WHEN $2::bigint IS NULL THEN max_assets WHEN $2 < 0 THEN NULL ELSE $2 END,
			max_stored_bytes = CASE WHEN $3::bigint IS NULL THEN max_stored_bytes WHEN $3 < 0 THEN NULL ELSE $3 END
		WHERE tenant_id = $1`, tenantID, maxAssets, maxBytes)
	if err != nil {
		return fmt.Errorf("set the quota of tenant %s: %w", tenantID, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("tenant %s does not exist", tenantID)
	}
	return nil
}
