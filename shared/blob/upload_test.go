package blob

import (
	"bytes"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

// put sends body with up's method, URL and headers.
func put(t *testing.T, up Upload, body []byte) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), up.Method, up.URL, bytes.NewReader(body))
	require.NoError(t, err)
	for name, value := range up.Headers {
		req.Header.Set(name, value)
	}
	req.ContentLength = int64(len(body))
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	require.NoError(t, resp.Body.Close())
	return resp
}

// TestPresignPut: a client uploads straight to the S3 server with the
// presigned PUT, the stored object reports the promised sha256, and a
// body that is not the promised one is refused by the server.
func TestPresignPut(t *testing.T) {
	t.Parallel()
	for _, backend := range backends {
		t.Run(backend.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, backend)
			ctx := testContext(t)

			const size = 256 << 10
			body, err := io.ReadAll(media(9, size))
			require.NoError(t, err)
			sum := mediaSHA256(t, 9, size)
			key, err := AssetKey(b.tenant, uuid.NewString(), "original")
			require.NoError(t, err)
			spec := UploadSpec{ContentType: "video/mp4", Size: size, SHA256: sum}
			up, err := b.store.PresignPut(ctx, key, spec, 5*time.Minute)
			require.NoError(t, err)
			require.Equal(t, http.MethodPut, up.Method)
			require.NotEmpty(t, up.Headers["X-Amz-Checksum-Sha256"], "the client must send the checksum the URL is signed for")
			require.WithinDuration(t, time.Now().Add(5*time.Minute), up.ExpiresAt, time.Minute)

			if !b.backend.lacks(serverChecksum) {
				other := bytes.Clone(body)
				other[0] ^= 0xff
				resp := put(t, up, other)
				require.GreaterOrEqual(t, resp.StatusCode, 400, "a body that is not the promised one is refused")
				_, err = b.store.Stat(ctx, key)
				require.ErrorIs(t, err, ErrNotFound)
			}

			resp := put(t, up, body)
			require.Equal(t, http.StatusOK, resp.StatusCode)
			obj, err := b.store.Stat(ctx, key)
			require.NoError(t, err)
			require.Equal(t, int64(size), obj.Size)
			require.Equal(t, "video/mp4", obj.ContentType)
			server, err := b.store.ServerSHA256(ctx, key)
			require.NoError(t, err)
			if !b.backend.lacks(serverChecksum) {
				require.Equal(t, sum, server, "the server keeps the checksum the upload was signed with")
			} else {
				require.Empty(t, server, "an unverified checksum is never reported as the server's")
			}
			_, err = b.store.ServerSHA256(ctx, key+"-missing")
			require.ErrorIs(t, err, ErrNotFound)

			_, err = b.store.PresignPut(ctx, key, UploadSpec{ContentType: "video/mp4", Size: size, SHA256: "nope"}, time.Minute)
			require.ErrorContains(t, err, "64 hex digits")
			_, err = b.store.PresignPut(ctx, key, spec, 2*MaxPresignTTL)
			require.ErrorContains(t, err, "ttl")
		})
	}
}
