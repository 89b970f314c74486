package embedded_test

import (
	"bytes"
	"io"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/local/embedded"
	"github.com/aivedio/pipeline/shared/blob"
	"github.com/aivedio/pipeline/shared/config"
)

// TestS3KeepsObjectsAcrossRestarts: a server started again on the same
// folder serves what the first one stored, with its metadata, and not what
// it deleted; a file a write died in is ignored.
func TestS3KeepsObjectsAcrossRestarts(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	open := func() *blob.Store {
		h, err := embedded.S3Handler(dir)
		require.NoError(t, err)
		srv := httptest.NewServer(h)
		t.Cleanup(srv.Close)
		s, err := blob.New(t.Context(), config.S3{Endpoint: srv.URL, Region: "us-east-1", Bucket: "media",
			AccessKeyID: "local", SecretAccessKey: "local"})
		require.NoError(t, err)
		return s
	}
	first := open()
	require.NoError(t, first.EnsureBucket(t.Context()))
	kept := bytes.Repeat([]byte("kept video "), 10_000)
	put, err := first.Put(t.Context(), "tasks/a/source.mp4", bytes.NewReader(kept), &blob.PutOpts{ContentType: "video/mp4"})
	require.NoError(t, err)
	_, err = first.Put(t.Context(), "tasks/b/gone.mp4", bytes.NewReader([]byte("deleted")), nil)
	require.NoError(t, err)
	require.NoError(t, first.Delete(t.Context(), "tasks/b/gone.mp4"))

	torn := filepath.Join(dir, "buckets", "media", ".put-123")
	require.NoError(t, os.WriteFile(torn, []byte(`{"key":"tasks/c/torn.mp4"}`+"\npart"), 0o644))

	second := open()
	require.NoFileExists(t, torn)
	r, obj, err := second.Open(t.Context(), "tasks/a/source.mp4")
	require.NoError(t, err)
	got, err := io.ReadAll(r)
	require.NoError(t, r.Close())
	require.NoError(t, err)
	require.Equal(t, kept, got)
	require.Equal(t, put.SHA256, obj.SHA256)
	require.Equal(t, "video/mp4", obj.ContentType)
	keys, err := second.List(t.Context(), "tasks/")
	require.NoError(t, err)
	require.Equal(t, []string{"tasks/a/source.mp4"}, keys)
}
