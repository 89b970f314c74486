package stagetest

import (
	"crypto/sha256"
	"os"
	"path/filepath"
	"testing"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/shared/asset"
	"github.com/aivedio/pipeline/shared/blob"
	"github.com/aivedio/pipeline/shared/task"
	"github.com/aivedio/pipeline/shared/tenant"
)

// NewTenant creates a tenant with [Credits] and returns it with its API
// key.
func NewTenant(t testing.TB, pool *pgxpool.Pool) (uuid.UUID, string) {
	t.Helper()
	var c tenant.Created
	require.NoError(t, pgx.BeginFunc(t.Context(), pool, func(tx pgx.Tx) error {
		var err error
		c, err = tenant.Create(t.Context(), tx, tenant.NewTenant{Name: "acme", Credits: Credits}, tenant.RoleTenant)
		return err
	}))
	return c.TenantID, c.Key
}

// NewUpload records the file at path as an upload of tenantID, declared as
// media and stored where the API puts it, moved to status (PROCESSING once
// completed, READY once probed; the probe columns stay empty), and removes
// the object after the test.
func NewUpload(t testing.TB, pool *pgxpool.Pool, store *blob.Store, tenantID uuid.UUID, media asset.MediaType, path string, status asset.Status) asset.Asset {
	t.Helper()
	body, err := os.ReadFile(path)
	require.NoError(t, err)
	sum := sha256.Sum256(body)
	var a asset.Asset
	require.NoError(t, pgx.BeginFunc(t.Context(), pool, func(tx pgx.Tx) error {
		id := uuid.Must(uuid.NewV7())
		key, err := blob.AssetKey(tenantID.String(), id.String(), "original")
		if err != nil {
			return err
		}
		a, _, err = asset.CreateUpload(t.Context(), tx, asset.NewUpload{ID: id, TenantID: tenantID, IdempotencyKey: id.String(), RequestHash: sum[:],
			MediaType: media, ContentType: contentTypes[media], SizeBytes: int64(len(body)), SHA256: sum[:],
			Filename: filepath.Base(path), ObjectKey: key})
		if err != nil || status == asset.PendingUpload {
			return err
		}
		if err := asset.MarkUploaded(t.Context(), tx, id, key); err != nil || status == asset.Processing {
			return err
		}
		return asset.MarkReady(t.Context(), tx, id)
	}))
	RemoveAfter(t, store, a.ObjectKey)
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	_, err = store.Put(t.Context(), a.ObjectKey, f, nil)
	require.NoError(t, err)
	got, err := asset.Get(t.Context(), pool, a.ID)
	require.NoError(t, err)
	return got
}

var contentTypes = map[asset.MediaType]string{asset.Video: "video/mp4", asset.Audio: "audio/mp4", asset.Image: "image/png"}

// UploadEvent is the postprocess event of step about upload a, as the API
// and the probe stage write it, naming tenantID.
func UploadEvent(t *testing.T, a asset.Asset, tenantID uuid.UUID, step string) event.Event {
	t.Helper()
	ev, err := task.Origin{Producer: "test"}.EmitFor(task.Aggregate{Type: task.AssetAggregateType, ID: a.ID, TenantID: tenantID},
		task.Postprocess{AssetID: a.ID, Step: step})
	require.NoError(t, err)
	ce, err := ev.Envelope.ToCloudEvent()
	require.NoError(t, err)
	return ce
}
