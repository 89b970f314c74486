package probe_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/functions/probe"
	"github.com/aivedio/pipeline/functions/stage/stagetest"
	"github.com/aivedio/pipeline/shared/asset"
	"github.com/aivedio/pipeline/shared/catalog"
	"github.com/aivedio/pipeline/shared/dbtest"
	"github.com/aivedio/pipeline/shared/media/mediatest"
	"github.com/aivedio/pipeline/shared/outcome"
)

// still is a 64x48 PNG.
func still(t *testing.T) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "still.png")
	cmd := exec.CommandContext(t.Context(), mediatest.FFmpeg(t), "-v", "error", "-f", "lavfi", "-i", "color=c=red:s=64x48", "-frames:v", "1", out)
	raw, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", raw)
	return out
}

// TestUploadsAreProbedAsWhatTheyDeclare: an upload is READY with its
// facts when it is the media it declared, and a video asks for its
// thumbnail; a file that is not that media is FAILED with a reason that
// names the file; a redelivery changes nothing.
func TestUploadsAreProbedAsWhatTheyDeclare(t *testing.T) {
	t.Parallel()
	pool, store := dbtest.TestSchema(t), newStore(t)
	fn := probe.New(probe.Params{Pool: pool, Blob: store, Media: newTool(t)})
	notMedia := filepath.Join(t.TempDir(), "notes.txt")
	require.NoError(t, os.WriteFile(notMedia, []byte("these are my notes, not a video\n"), 0o600))
	video := clip(t, false)
	audio := mediatest.Clip(t, mediatest.ClipParams{Duration: time.Second, NoVideo: true})

	for _, c := range []struct {
		name      string
		media     asset.MediaType
		path      string
		status    asset.Status
		code      string
		thumbnail bool
	}{
		{"video", asset.Video, video, asset.Ready, "", true},
		{"audio", asset.Audio, audio, asset.Ready, "", false},
		{"image", asset.Image, still(t), asset.Ready, "", false},
		{"text as video", asset.Video, notMedia, asset.Failed, "media.not_a_video", false},
		{"audio as video", asset.Video, audio, asset.Failed, "media.not_a_video", false},
		{"video as audio", asset.Audio, clip(t, true), asset.Failed, "media.not_audio", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			tenantID, _ := stagetest.NewTenant(t, pool)
			a := stagetest.NewUpload(t, pool, store, tenantID, c.media, c.path, asset.Processing)
			ev := stagetest.UploadEvent(t, a, a.TenantID, catalog.TagProbe)
			_, err := fn.Handle(t.Context(), ev)
			require.NoError(t, err)
			got, err := asset.Get(t.Context(), pool, a.ID)
			require.NoError(t, err)
			require.Equal(t, c.status, got.Status, got.ErrorMessage)
			require.Equal(t, c.code, got.ErrorCode)
			if c.code != "" {
				require.Contains(t, got.ErrorMessage, filepath.Base(c.path), "the reason names the file")
				require.NotContains(t, got.ErrorMessage, "://", "and never the storage URL")
			} else {
				require.True(t, got.Probed)
				require.NotNil(t, got.DurationMS)
			}
			var thumbs int
			require.NoError(t, pool.QueryRow(t.Context(), `SELECT count(*) FROM outbox_events WHERE aggregate_id = $1 AND tag = $2`,
				a.ID.String(), catalog.TagThumbnail).Scan(&thumbs))
			require.Equal(t, c.thumbnail, thumbs == 1)

			_, err = fn.Handle(t.Context(), ev)
			require.NoError(t, err, "a redelivery is a duplicate")
			again, err := asset.Get(t.Context(), pool, a.ID)
			require.NoError(t, err)
			require.Equal(t, got.UpdatedAt, again.UpdatedAt)
		})
	}
}

// encode writes a 1 s, 64x48 test pattern to name with the given ffmpeg
// output options.
func encode(t *testing.T, name string, opts ...string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), name)
	args := append([]string{"-v", "error", "-f", "lavfi", "-i", "testsrc=d=1:s=64x48:r=25"}, opts...)
	raw, err := exec.CommandContext(t.Context(), mediatest.FFmpeg(t), append(args, out)...).CombinedOutput()
	require.NoError(t, err, "%s", raw)
	return out
}

// TestUploadsOutsideTheAllowListAreRefused: an upload in a container,
// codec or size the pipeline does not take is FAILED
// asset.unsupported_format with what was refused; a playlist is refused
// before it is read, so the segments it names are never fetched.
func TestUploadsOutsideTheAllowListAreRefused(t *testing.T) {
	t.Parallel()
	pool, store := dbtest.TestSchema(t), newStore(t)
	fn := probe.New(probe.Params{Pool: pool, Blob: store, Media: newTool(t)})

	segment := encode(t, "segment.ts", "-c:v", "libx264", "-f", "mpegts")
	var fetched atomic.Int32
	elsewhere := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fetched.Add(1)
		http.ServeFile(w, r, segment)
	}))
	t.Cleanup(elsewhere.Close)
	playlist := filepath.Join(t.TempDir(), "clip.m3u8")
	require.NoError(t, os.WriteFile(playlist, fmt.Appendf(nil,
		"#EXTM3U\n#EXT-X-TARGETDURATION:1\n#EXTINF:1.0,\n%s/segment.ts\n#EXT-X-ENDLIST\n", elsewhere.URL), 0o600))

	for _, c := range []struct {
		name, path, reason string
	}{
		{"an HLS playlist", playlist, "playlists, manifests and SVG are never read"},
		{"a codec off the list", encode(t, "lossless.mkv", "-c:v", "ffv1"), `video codec "ffv1"`},
		{"a frame rate over the cap", encode(t, "fast.mp4", "-c:v", "libx264", "-r", "240"), "over the cap of 120"},
	} {
		t.Run(c.name, func(t *testing.T) {
			tenantID, _ := stagetest.NewTenant(t, pool)
			a := stagetest.NewUpload(t, pool, store, tenantID, asset.Video, c.path, asset.Processing)
			_, err := fn.Handle(t.Context(), stagetest.UploadEvent(t, a, a.TenantID, catalog.TagProbe))
			require.NoError(t, err)
			got, err := asset.Get(t.Context(), pool, a.ID)
			require.NoError(t, err)
			require.Equal(t, asset.Failed, got.Status, "%s: %s", got.ErrorCode, got.ErrorMessage)
			require.Equal(t, "asset.unsupported_format", got.ErrorCode, got.ErrorMessage)
			require.Contains(t, got.ErrorMessage, c.reason)
			require.Contains(t, got.ErrorMessage, filepath.Base(c.path), "the reason names the file")
			require.NotContains(t, got.ErrorMessage, "://", "and never the storage URL")
		})
	}
	require.Zero(t, fetched.Load(), "the playlist's segment was never fetched")
}

// TestAnUploadOfAnotherTenantIsASecurityError: an upload's probe whose
// event names another tenant is quarantined as a tenant mismatch.
func TestAnUploadOfAnotherTenantIsASecurityError(t *testing.T) {
	t.Parallel()
	pool, store := dbtest.TestSchema(t), newStore(t)
	fn := probe.New(probe.Params{Pool: pool, Blob: store, Media: newTool(t)})
	tenantID, _ := stagetest.NewTenant(t, pool)
	a := stagetest.NewUpload(t, pool, store, tenantID, asset.Video, clip(t, false), asset.Processing)
	_, err := fn.Handle(t.Context(), stagetest.UploadEvent(t, a, uuid.New(), catalog.TagProbe))
	require.Equal(t, 422, statusOf(t, err))
	_, code := outcome.Of(outcome.FromResult(err))
	require.Equal(t, "security.tenant_mismatch", code)
	got, err := asset.Get(t.Context(), pool, a.ID)
	require.NoError(t, err)
	require.Equal(t, asset.Processing, got.Status)
}
