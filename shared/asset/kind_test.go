package asset_test

import (
	"context"
	"crypto/sha256"
	"fmt"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/shared/aggregate/aggregatetest"
	"github.com/aivedio/pipeline/shared/asset"
	"github.com/aivedio/pipeline/shared/dbtest"
	"github.com/aivedio/pipeline/shared/tenant"
)

func TestUploadConforms(t *testing.T) {
	t.Parallel()
	pool := dbtest.TestSchema(t)
	var created tenant.Created
	require.NoError(t, pgx.BeginFunc(t.Context(), pool, func(tx pgx.Tx) error {
		var err error
		created, err = tenant.Create(t.Context(), tx, tenant.NewTenant{Name: "acme", Credits: 1000}, tenant.RoleTenant)
		return err
	}))
	aggregatetest.Exercise(t, aggregatetest.Harness[uuid.UUID, asset.Status, asset.Asset]{
		Kind: asset.Upload,
		Pool: pool,
		Create: func(t *testing.T, s asset.Status) uuid.UUID {
			id := uuid.New()
			sum := sha256.Sum256([]byte(id.String()))
			require.NoError(t, pgx.BeginFunc(t.Context(), pool, func(tx pgx.Tx) error {
				if _, _, err := asset.CreateUpload(t.Context(), tx, asset.NewUpload{ID: id, TenantID: created.TenantID,
					IdempotencyKey: id.String(), RequestHash: sum[:], MediaType: asset.Video, ContentType: "video/mp4",
					SizeBytes: 1, SHA256: sum[:], Filename: "a.mp4", ObjectKey: "uploads/" + id.String()}); err != nil {
					return err
				}
				// Put straight into s, as no stage would: the suite needs a
				// row in every status.
				_, err := tx.Exec(t.Context(), `UPDATE assets SET status = $2,
					error_code = CASE WHEN $2 = 'FAILED' THEN 'test' END WHERE asset_id = $1`, id, s)
				return err
			}))
			return id
		},
		Move: func(ctx context.Context, tx pgx.Tx, cur asset.Asset, to asset.Status) error {
			switch {
			case cur.Status == asset.PendingUpload && to == asset.Processing:
				return asset.MarkUploaded(ctx, tx, cur.ID, cur.ObjectKey+".checked")
			case to == asset.Ready:
				return asset.MarkReady(ctx, tx, cur.ID)
			case to == asset.Failed:
				return asset.Fail(ctx, tx, cur.ID, "test", "conformance")
			}
			return fmt.Errorf("no write moves an upload %s -> %s", cur.Status, to)
		},
	})
}
