package transcode_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/functions/stage/stagetest"
	"github.com/aivedio/pipeline/functions/transcode"
	"github.com/aivedio/pipeline/shared/asset"
	"github.com/aivedio/pipeline/shared/catalog"
	"github.com/aivedio/pipeline/shared/dbtest"
	"github.com/aivedio/pipeline/shared/media/mediatest"
)

// TestAnUploadedVideoGetsItsThumbnail: the thumbnail of a READY upload is
// made once, stored under the upload's prefix, and recorded as its
// derivative; an upload gets no other step.
func TestAnUploadedVideoGetsItsThumbnail(t *testing.T) {
	t.Parallel()
	pool, store := dbtest.TestSchema(t), newStore(t)
	fn := transcode.New(transcode.Params{Pool: pool, Blob: store, Media: newTool(t), TmpDir: t.TempDir()})
	tenantID, _ := stagetest.NewTenant(t, pool)
	path := mediatest.Clip(t, mediatest.ClipParams{Duration: 2 * time.Second, Width: 160, Height: 120, Rate: 10})
	a := stagetest.NewUpload(t, pool, store, tenantID, asset.Video, path, asset.Ready)

	ev := stagetest.UploadEvent(t, a, tenantID, catalog.TagThumbnail)
	_, err := fn.Handle(t.Context(), ev)
	require.NoError(t, err)
	derived, err := asset.Derivatives(t.Context(), pool, a.ID)
	require.NoError(t, err)
	require.Len(t, derived, 1)
	thumb := derived[0]
	require.Equal(t, asset.KindThumbnail, thumb.Kind)
	require.Equal(t, asset.Ready, thumb.Status)
	require.Nil(t, thumb.TaskID)
	require.Contains(t, thumb.ObjectKey, a.ID.String(), "stored under the upload's own prefix")
	stagetest.RemoveAfter(t, store, thumb.ObjectKey)
	obj, err := store.Stat(t.Context(), thumb.ObjectKey)
	require.NoError(t, err)
	require.Positive(t, obj.Size)

	_, err = fn.Handle(t.Context(), stagetest.UploadEvent(t, a, tenantID, catalog.TagThumbnail))
	require.NoError(t, err, "a second request finds the thumbnail made")
	derived, err = asset.Derivatives(t.Context(), pool, a.ID)
	require.NoError(t, err)
	require.Len(t, derived, 1)

	_, err = fn.Handle(t.Context(), stagetest.UploadEvent(t, a, tenantID, catalog.TagTranscodeProxy))
	require.Equal(t, http.StatusUnprocessableEntity, stagetest.StatusOf(t, err), "an upload gets a thumbnail only")
}
