package asset_test

import (
	"crypto/sha256"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/shared/asset"
)

func TestRecordRenderOncePerKey(t *testing.T) {
	t.Parallel()
	b := setup(t)
	sum := sha256.Sum256([]byte("render"))
	key := "tenants/" + b.tenantID.String() + "/renders/" + uuid.NewString() + "/output.mp4"
	n := asset.NewRender{TenantID: b.tenantID, ObjectKey: key, SHA256: sum[:], SizeBytes: 7}

	_, found, err := asset.ReadyRender(t.Context(), b.tx, b.tenantID, key)
	require.NoError(t, err)
	require.False(t, found, "nothing is stored yet")

	id, inserted, err := asset.RecordRender(t.Context(), b.tx, n)
	require.NoError(t, err)
	require.True(t, inserted)
	a, err := asset.Get(t.Context(), b.tx, id)
	require.NoError(t, err)
	require.Equal(t, asset.KindRender, a.Kind)
	require.Equal(t, asset.Ready, a.Status)
	require.Equal(t, "video/mp4", a.ContentType)

	_, inserted, err = asset.RecordRender(t.Context(), b.tx, n)
	require.NoError(t, err)
	require.False(t, inserted, "one asset per object key")
	at, found, err := asset.StoredAt(t.Context(), b.tx, key)
	require.NoError(t, err)
	require.True(t, found)
	require.Equal(t, id, at)

	ready, found, err := asset.ReadyRender(t.Context(), b.tx, b.tenantID, key)
	require.NoError(t, err)
	require.True(t, found)
	require.Equal(t, id, ready)
	_, found, err = asset.ReadyRender(t.Context(), b.tx, uuid.New(), key)
	require.NoError(t, err)
	require.False(t, found, "another tenant's render is not reused")
}
