package asset_test

import (
	"crypto/sha256"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/shared/asset"
	"github.com/aivedio/pipeline/shared/dbtest"
	"github.com/aivedio/pipeline/shared/tenant"
)

type testBundle struct {
	tx       pgx.Tx
	tenantID uuid.UUID
}

func setup(t *testing.T) *testBundle {
	t.Helper()
	tx := dbtest.TestTx(t)
	c, err := tenant.Create(t.Context(), tx, tenant.NewTenant{Name: "acme", Credits: 10}, tenant.RoleTenant)
	require.NoError(t, err)
	return &testBundle{tx: tx, tenantID: c.TenantID}
}

// upload announces an upload under key whose announcement hashes to body.
func (b *testBundle) upload(t *testing.T, key, body string) (asset.Asset, bool, error) {
	t.Helper()
	id := uuid.Must(uuid.NewV7())
	hash := sha256.Sum256([]byte(body))
	sum := sha256.Sum256([]byte("bytes of " + body))
	return asset.CreateUpload(t.Context(), b.tx, asset.NewUpload{ID: id, TenantID: b.tenantID, IdempotencyKey: key, RequestHash: hash[:],
		MediaType: asset.Video, ContentType: "video/mp4", SizeBytes: 42, SHA256: sum[:], Filename: "clip.mp4",
		ObjectKey: "tenants/" + b.tenantID.String() + "/assets/" + id.String() + "/original"})
}

func TestCreateUploadIsIdempotent(t *testing.T) {
	t.Parallel()
	b := setup(t)
	a, created, err := b.upload(t, "k1", "clip")
	require.NoError(t, err)
	require.True(t, created)
	require.Equal(t, asset.PendingUpload, a.Status)
	require.Equal(t, asset.Video, a.MediaType)
	require.Equal(t, "clip.mp4", a.Filename)
	require.Nil(t, a.TaskID)

	again, created, err := b.upload(t, "k1", "clip")
	require.NoError(t, err)
	require.False(t, created)
	require.Equal(t, a.ID, again.ID, "the same announcement finds the same asset")

	_, _, err = b.upload(t, "k1", "another clip")
	require.ErrorIs(t, err, asset.ErrIdempotencyConflict)
}

func TestUploadLifecycle(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	a, _, err := b.upload(t, "k1", "clip")
	require.NoError(t, err)

	require.ErrorIs(t, asset.MarkReady(ctx, b.tx, a.ID), asset.ErrStale, "an upload not checked yet is not READY")
	require.NoError(t, asset.MarkUploaded(ctx, b.tx, a.ID, "t/a/source"))
	require.ErrorIs(t, asset.MarkUploaded(ctx, b.tx, a.ID, "t/a/other"), asset.ErrStale, "completed once")
	require.NoError(t, asset.MarkReady(ctx, b.tx, a.ID))
	got, err := asset.Get(ctx, b.tx, a.ID)
	require.NoError(t, err)
	require.Equal(t, asset.Ready, got.Status)
	require.Equal(t, "t/a/source", got.ObjectKey, "the checked copy's key")
	require.ErrorIs(t, asset.Fail(ctx, b.tx, a.ID, "media.x", "late"), asset.ErrStale, "a READY asset does not fail")

	other, _, err := b.upload(t, "k2", "not media")
	require.NoError(t, err)
	require.NoError(t, asset.Fail(ctx, b.tx, other.ID, "media.not_media", "ffprobe found no stream"))
	got, err = asset.Get(ctx, b.tx, other.ID)
	require.NoError(t, err)
	require.Equal(t, asset.Failed, got.Status)
	require.Equal(t, "media.not_media", got.ErrorCode)
	require.Equal(t, "ffprobe found no stream", got.ErrorMessage)
}

func TestOfTenantHidesAnotherTenantsAsset(t *testing.T) {
	t.Parallel()
	b := setup(t)
	a, _, err := b.upload(t, "k1", "clip")
	require.NoError(t, err)
	_, err = asset.OfTenant(t.Context(), b.tx, b.tenantID, a.ID)
	require.NoError(t, err)
	_, err = asset.OfTenant(t.Context(), b.tx, uuid.New(), a.ID)
	require.ErrorIs(t, err, asset.ErrNotFound)
	_, err = asset.Get(t.Context(), b.tx, uuid.New())
	require.ErrorIs(t, err, asset.ErrNotFound)
}

func TestListPagesNewestFirst(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var ids []uuid.UUID
	for i := range 5 {
		a, _, err := b.upload(t, uuid.NewString(), uuid.NewString())
		require.NoError(t, err)
		// Distinct, increasing creation times, as separate requests have.
		_, err = b.tx.Exec(t.Context(), `UPDATE assets SET created_at = now() + $2 * interval '1 second' WHERE asset_id = $1`, a.ID, i)
		require.NoError(t, err)
		ids = append([]uuid.UUID{a.ID}, ids...)
	}
	var seen []uuid.UUID
	cursor := ""
	for pages := 0; ; pages++ {
		require.Less(t, pages, 5)
		p, err := asset.List(t.Context(), b.tx, b.tenantID, cursor, 2)
		require.NoError(t, err)
		for _, a := range p.Assets {
			seen = append(seen, a.ID)
		}
		if p.Next == "" {
			break
		}
		cursor = p.Next
	}
	require.Equal(t, ids, seen)

	p, err := asset.List(t.Context(), b.tx, uuid.New(), "", 10)
	require.NoError(t, err)
	require.Empty(t, p.Assets, "another tenant lists none of them")

	_, err = asset.List(t.Context(), b.tx, b.tenantID, "not-a-cursor", 10)
	require.ErrorIs(t, err, asset.ErrBadCursor)
}
