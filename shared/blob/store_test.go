package blob

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"io"
	mathrand "math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"testing"
	"testing/iotest"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"
	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/shared/config"
	"github.com/aivedio/pipeline/shared/servicetest"
)

// testBucket is shared by the integration tests; each test works under its
// own random tenant prefix and removes what it wrote.
const testBucket = "aivedio-blob-test"

type testBundle struct {
	store   *Store
	tenant  string
	backend backend
}

// setup connects to the backend's S3 server and returns a Store on the shared
// test bucket plus a tenant id no other test uses.
func setup(t *testing.T, backend backend) *testBundle {
	t.Helper()
	cfg := backend.config(t)
	cfg.Bucket = testBucket

	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	store, err := New(ctx, cfg)
	require.NoError(t, err)
	require.NoError(t, store.EnsureBucket(ctx))
	anchorTenants(t, ctx, backend.name, store)

	b := &testBundle{store: store, tenant: "test-" + randomHex(t, 8), backend: backend}
	t.Cleanup(func() { b.removeAll(t) })
	return b
}

// anchored holds, per backend name, the one put of tenantsAnchor.
var anchored sync.Map

// tenantsAnchor is an object that keeps the bucket's tenants/ directory
// from ever being empty. versitygw's posix backend removes a key's empty
// parent directories on delete; a test's cleanup that empties tenants/
// then races another test's PutObject between its MkdirAll and its link,
// and that put fails with 409 ExistingObjectIsDirectory (it did in CI on
// 2026-12-07; versitygw v1.8.0 retries only the link). No test lists
// above its own tenant's prefix, so the anchor is invisible to them.
const tenantsAnchor = "tenants/.anchor"

// anchorTenants puts tenantsAnchor once per backend and process: once,
// because concurrent puts of one key are a second versitygw race.
func anchorTenants(t *testing.T, ctx context.Context, name string, store *Store) {
	t.Helper()
	once, _ := anchored.LoadOrStore(name, sync.OnceValue(func() error {
		_, err := store.client.PutObject(ctx, &s3.PutObjectInput{
			Bucket: aws.String(store.bucket), Key: aws.String(tenantsAnchor), Body: strings.NewReader(""),
		})
		return err
	}))
	require.NoError(t, once.(func() error)(), "put %s", tenantsAnchor)
}

// testConfig loads the S3 block from the environment the way binaries do,
// after making sure the variables of the server `make test` starts are there.
func testConfig(t *testing.T) config.S3 {
	t.Helper()
	servicetest.Env(t, "S3 server", "S3_ENDPOINT")
	servicetest.Env(t, "S3 server", "S3_ACCESS_KEY_ID")
	servicetest.Env(t, "S3 server", "S3_SECRET_ACCESS_KEY")
	var cfg config.S3
	require.NoError(t, config.Load(&cfg))
	return cfg
}

// key returns the deterministic key of one object of this test's tenant.
func (b *testBundle) key(t *testing.T, task, name string) string {
	t.Helper()
	key, err := Key(b.tenant, task, "output", name)
	require.NoError(t, err)
	return key
}

// list returns the objects and unfinished multipart uploads under the
// tenant's prefix.
func (b *testBundle) list(t *testing.T) ([]types.Object, []types.MultipartUpload) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	prefix := aws.String("tenants/" + b.tenant + "/")
	objects, err := b.store.client.ListObjectsV2(ctx, &s3.ListObjectsV2Input{
		Bucket: aws.String(b.store.bucket),
		Prefix: prefix,
	})
	require.NoError(t, err)
	uploads, err := b.store.client.ListMultipartUploads(ctx, &s3.ListMultipartUploadsInput{
		Bucket: aws.String(b.store.bucket),
		Prefix: prefix,
	})
	var apiErr smithy.APIError
	if b.backend.lacks(listNoUploads) && errors.As(err, &apiErr) && apiErr.ErrorCode() == "NoSuchUpload" {
		// The bucket has never had a multipart upload, so it has none now.
		return objects.Contents, nil
	}
	require.NoError(t, err)
	return objects.Contents, uploads.Uploads
}

func (b *testBundle) removeAll(t *testing.T) {
	objects, _ := b.list(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, o := range objects {
		require.NoError(t, b.store.Delete(ctx, aws.ToString(o.Key)))
	}
}

func testContext(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func randomHex(t *testing.T, n int) string {
	t.Helper()
	b := make([]byte, n)
	_, err := rand.Read(b)
	require.NoError(t, err)
	return hex.EncodeToString(b)
}

// media returns a deterministic pseudo-random body of size bytes, generated
// on the fly: the same seed gives the same bytes, so a test can hash the body
// independently without ever holding it.
func media(seed byte, size int64) io.Reader {
	var s [32]byte
	s[0] = seed
	return io.LimitReader(mathrand.NewChaCha8(s), size)
}

// mediaSHA256 hashes media(seed, size) in its own pass.
func mediaSHA256(t *testing.T, seed byte, size int64) string {
	t.Helper()
	h := sha256.New()
	n, err := io.Copy(h, media(seed, size))
	require.NoError(t, err)
	require.Equal(t, size, n)
	return hex.EncodeToString(h.Sum(nil))
}

// readSHA256 drains r and returns its length and hex sha256.
func readSHA256(t *testing.T, r io.Reader) (int64, string) {
	t.Helper()
	h := sha256.New()
	n, err := io.Copy(h, r)
	require.NoError(t, err)
	return n, hex.EncodeToString(h.Sum(nil))
}

// serverSHA256 returns the full-object SHA256 checksum the server itself
// keeps for key, in hex, and the sha256 metadata Put recorded.
func (b *testBundle) serverSHA256(t *testing.T, key string) (checksum, meta string) {
	t.Helper()
	out, err := b.store.client.HeadObject(testContext(t), &s3.HeadObjectInput{
		Bucket:       aws.String(b.store.bucket),
		Key:          aws.String(key),
		ChecksumMode: types.ChecksumModeEnabled,
	})
	require.NoError(t, err)
	if v := aws.ToString(out.ChecksumSHA256); v != "" {
		require.Equal(t, types.ChecksumTypeFullObject, out.ChecksumType)
		raw, err := base64.StdEncoding.DecodeString(v)
		require.NoError(t, err)
		checksum = hex.EncodeToString(raw)
	}
	return checksum, out.Metadata[metaSHA256]
}

func TestPutMultipartStreams(t *testing.T) {
	t.Parallel()
	for _, backend := range backends {
		t.Run(backend.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, backend)
			ctx := testContext(t)

			const size = 20<<20 + 12345 // three parts: 8 MiB, 8 MiB, the rest
			want := mediaSHA256(t, 1, size)
			key := b.key(t, "task-1", "clip.mp4")

			rec := &readRecorder{r: media(1, size)}
			obj, err := b.store.Put(ctx, key, rec, &PutOpts{ContentType: "video/mp4"})
			require.NoError(t, err)
			require.Equal(t, key, obj.Key)
			require.Equal(t, int64(size), obj.Size)
			require.Equal(t, want, obj.SHA256)
			require.Equal(t, "video/mp4", obj.ContentType)
			require.Equal(t, 3, obj.Parts, "a 20 MiB body must go up as a multipart upload")
			require.NotEmpty(t, obj.ETag)

			// Streamed: the body was handed out in pieces no larger than one part.
			require.Equal(t, int64(size), rec.total)
			require.LessOrEqual(t, rec.maxAsk, PartSize)
			require.LessOrEqual(t, rec.maxGot, PartSize)

			stat, err := b.store.Stat(ctx, key)
			require.NoError(t, err)
			require.Equal(t, obj, Object{
				Key: stat.Key, Size: stat.Size, SHA256: stat.SHA256,
				ContentType: stat.ContentType, ETag: stat.ETag, Parts: obj.Parts,
			})

			// The digest is recorded as metadata. The server holds no full-object
			// SHA256 of its own for a multipart object (only per-part CRCs), and
			// must not pretend to.
			checksum, meta := b.serverSHA256(t, key)
			require.Equal(t, want, meta)
			require.Empty(t, checksum)

			body, opened, err := b.store.Open(ctx, key)
			require.NoError(t, err)
			t.Cleanup(func() { require.NoError(t, body.Close()) })
			require.Equal(t, stat, opened)
			n, got := readSHA256(t, body)
			require.Equal(t, int64(size), n)
			require.Equal(t, want, got)

			objects, uploads := b.list(t)
			require.Len(t, objects, 1)
			require.Empty(t, uploads)
		})
	}
}

func TestPutSingle(t *testing.T) {
	t.Parallel()
	for _, backend := range backends {
		t.Run(backend.name, func(t *testing.T) {
			t.Parallel()
			backend.need(t, serverChecksum)
			b := setup(t, backend)
			ctx := testContext(t)

			const size = 300 << 10
			want := mediaSHA256(t, 2, size)
			key := b.key(t, "task-1", "thumb.jpg")

			obj, err := b.store.Put(ctx, key, media(2, size), &PutOpts{ContentType: "image/jpeg", Size: size})
			require.NoError(t, err)
			require.Equal(t, 0, obj.Parts)
			require.Equal(t, int64(size), obj.Size)
			require.Equal(t, want, obj.SHA256)

			stat, err := b.store.Stat(ctx, key)
			require.NoError(t, err)
			require.Equal(t, obj, stat)

			checksum, meta := b.serverSHA256(t, key)
			require.Equal(t, want, meta)
			require.Equal(t, want, checksum)

			// An empty body is an object too, with the sha256 of nothing.
			empty := b.key(t, "task-1", "empty.txt")
			obj, err = b.store.Put(ctx, empty, media(0, 0), nil)
			require.NoError(t, err)
			require.Equal(t, int64(0), obj.Size)
			require.Equal(t, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855", obj.SHA256)
			require.Equal(t, defaultContentType, obj.ContentType)
			stat, err = b.store.Stat(ctx, empty)
			require.NoError(t, err)
			require.Equal(t, obj, stat)
		})
	}
}

func TestPutOverwrites(t *testing.T) {
	t.Parallel()
	for _, backend := range backends {
		t.Run(backend.name, func(t *testing.T) {
			t.Parallel()
			backend.need(t, replaceMetadata)
			b := setup(t, backend)
			ctx := testContext(t)
			key := b.key(t, "task-1", "out.mp4")

			// small, then multipart, then small again: each write fully replaces the
			// last, metadata included.
			for i, size := range []int64{1 << 20, PartSize + 1<<20, 2 << 10} {
				seed := byte(10 + i)
				want := mediaSHA256(t, seed, size)

				obj, err := b.store.Put(ctx, key, media(seed, size), nil)
				require.NoError(t, err)
				require.Equal(t, want, obj.SHA256)

				stat, err := b.store.Stat(ctx, key)
				require.NoError(t, err)
				require.Equal(t, size, stat.Size)
				require.Equal(t, want, stat.SHA256)

				body, _, err := b.store.Open(ctx, key)
				require.NoError(t, err)
				n, got := readSHA256(t, body)
				require.NoError(t, body.Close())
				require.Equal(t, size, n)
				require.Equal(t, want, got)

				objects, uploads := b.list(t)
				require.Len(t, objects, 1, "a re-run must overwrite, not duplicate")
				require.Equal(t, key, aws.ToString(objects[0].Key))
				require.Empty(t, uploads)
			}
		})
	}
}

func TestMissingObject(t *testing.T) {
	t.Parallel()
	for _, backend := range backends {
		t.Run(backend.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, backend)
			ctx := testContext(t)
			key := b.key(t, "task-1", "missing.mp4")

			_, err := b.store.Stat(ctx, key)
			require.ErrorIs(t, err, ErrNotFound)

			body, _, err := b.store.Open(ctx, key)
			require.ErrorIs(t, err, ErrNotFound)
			require.Nil(t, body)

			require.NoError(t, b.store.Delete(ctx, key), "deleting a missing object is success")

			_, err = b.store.Put(ctx, key, media(3, 1000), nil)
			require.NoError(t, err)
			require.NoError(t, b.store.Delete(ctx, key))
			require.NoError(t, b.store.Delete(ctx, key))
			_, err = b.store.Stat(ctx, key)
			require.ErrorIs(t, err, ErrNotFound)
		})
	}
}

func TestPutFailureLeavesNoObject(t *testing.T) {
	t.Parallel()
	for _, backend := range backends {
		t.Run(backend.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, backend)
			ctx := testContext(t)

			// An earlier good object under the key survives every failed Put below.
			key := b.key(t, "task-1", "out.mp4")
			good, err := b.store.Put(ctx, key, media(4, 1000), nil)
			require.NoError(t, err)

			readErr := errors.New("provider connection reset")
			for _, tc := range []struct {
				name    string
				body    io.Reader
				size    int64
				wantErr error
				errText string
			}{
				{"single part shorter than declared", media(5, 1000), 2000, io.ErrUnexpectedEOF, ""},
				{"single part longer than declared", media(5, 3000), 2000, nil, "longer than the declared"},
				{"multipart shorter than declared", media(5, PartSize+1<<20), 2 * PartSize, io.ErrUnexpectedEOF, ""},
				{"multipart read error", io.MultiReader(media(5, PartSize+1<<20), iotest.ErrReader(readErr)), 0, readErr, ""},
			} {
				t.Run(tc.name, func(t *testing.T) {
					// Not parallel: the subtests share the key on purpose.
					_, err := b.store.Put(ctx, key, tc.body, &PutOpts{Size: tc.size})
					if tc.wantErr != nil {
						require.ErrorIs(t, err, tc.wantErr)
					} else {
						require.ErrorContains(t, err, tc.errText)
					}

					stat, err := b.store.Stat(ctx, key)
					require.NoError(t, err)
					require.Equal(t, good, stat)

					objects, uploads := b.list(t)
					require.Len(t, objects, 1)
					require.Empty(t, uploads, "a failed multipart upload must be aborted")
				})
			}
		})
	}
}

func TestPresignGet(t *testing.T) {
	t.Parallel()
	for _, backend := range backends {
		t.Run(backend.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, backend)
			ctx := testContext(t)

			const size = 2 << 20
			want := mediaSHA256(t, 6, size)
			key := b.key(t, "task-1", "download.mp4")
			_, err := b.store.Put(ctx, key, media(6, size), &PutOpts{ContentType: "video/mp4"})
			require.NoError(t, err)

			url, err := b.store.PresignGet(ctx, key, 5*time.Minute)
			require.NoError(t, err)

			req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
			require.NoError(t, err)
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			t.Cleanup(func() { require.NoError(t, resp.Body.Close()) })
			require.Equal(t, http.StatusOK, resp.StatusCode)
			require.Equal(t, "video/mp4", resp.Header.Get("Content-Type"))
			n, got := readSHA256(t, resp.Body)
			require.Equal(t, int64(size), n)
			require.Equal(t, want, got)

			_, err = b.store.PresignGet(ctx, key, MaxPresignTTL)
			require.NoError(t, err, "exactly the limit is allowed")

			for _, ttl := range []time.Duration{2 * time.Hour, MaxPresignTTL + time.Second} {
				url, err := b.store.PresignGet(ctx, key, ttl)
				require.ErrorContains(t, err, "short-lived")
				require.Empty(t, url)
			}
			for _, ttl := range []time.Duration{0, -time.Minute} {
				_, err := b.store.PresignGet(ctx, key, ttl)
				require.ErrorContains(t, err, "must be positive")
			}
		})
	}
}

// TestPresignDownloadIsAnAttachment: a download handed to a client comes
// as an attachment under its file name, and as a content type from the
// allow-list: an object stored as SVG or HTML is served as bytes, never
// rendered by a browser in the storage's origin.
func TestPresignDownloadIsAnAttachment(t *testing.T) {
	t.Parallel()
	for _, backend := range backends {
		t.Run(backend.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, backend)
			ctx := testContext(t)
			for _, c := range []struct {
				name, stored, filename, wantType, wantDisposition string
			}{
				{"a video", "video/mp4", "clip.mp4", "video/mp4", `attachment; filename=clip.mp4`},
				{"an SVG", "image/svg+xml", "logo.svg", "application/octet-stream", `attachment; filename=logo.svg`},
				{"HTML", "text/html", "page one.html", "application/octet-stream", `attachment; filename="page one.html"`},
				{"a name that is not ASCII", "image/png", "été.png", "image/png", `attachment; filename*=utf-8''%C3%A9t%C3%A9.png`},
			} {
				t.Run(c.name, func(t *testing.T) {
					key := b.key(t, "task-1", c.filename)
					_, err := b.store.Put(ctx, key, strings.NewReader("<svg onload=alert(1)/>"), &PutOpts{ContentType: c.stored})
					require.NoError(t, err)
					url, err := b.store.PresignDownload(ctx, key, 5*time.Minute, Download{Filename: c.filename, ContentType: c.stored})
					require.NoError(t, err)
					req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
					require.NoError(t, err)
					resp, err := http.DefaultClient.Do(req)
					require.NoError(t, err)
					require.NoError(t, resp.Body.Close())
					require.Equal(t, http.StatusOK, resp.StatusCode)
					require.Equal(t, c.wantType, resp.Header.Get("Content-Type"))
					require.Equal(t, c.wantDisposition, resp.Header.Get("Content-Disposition"))
				})
			}
		})
	}
}

func TestEnsureBucket(t *testing.T) {
	t.Parallel()
	for _, backend := range backends {
		t.Run(backend.name, func(t *testing.T) {
			t.Parallel()
			backend.need(t, alreadyOwnedByYou)
			ctx := testContext(t)
			server := backend.config(t)

			// newStore returns a Store on a fresh bucket that the test removes.
			newStore := func(t *testing.T) *Store {
				t.Helper()
				cfg := server
				cfg.Bucket = "aivedio-blob-ensure-" + randomHex(t, 6)
				store, err := New(ctx, cfg)
				require.NoError(t, err)
				t.Cleanup(func() {
					ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
					defer cancel()
					_, err := store.client.DeleteBucket(ctx, &s3.DeleteBucketInput{Bucket: aws.String(store.Bucket())})
					require.NoError(t, err)
				})
				return store
			}

			store := newStore(t)
			require.NoError(t, store.EnsureBucket(ctx))
			require.NoError(t, store.EnsureBucket(ctx), "an existing bucket is success")

			// Concurrent first calls race to create one bucket; all must succeed.
			racing := newStore(t)
			errs := make(chan error, 4)
			for range cap(errs) {
				go func() { errs <- racing.EnsureBucket(ctx) }()
			}
			for range cap(errs) {
				require.NoError(t, <-errs)
			}

			// And the store works in it.
			_, err := racing.Put(ctx, "probe", media(7, 10), nil)
			require.NoError(t, err)
			require.NoError(t, racing.Delete(ctx, "probe"))
		})
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	t.Parallel()
	_, err := New(t.Context(), config.S3{Endpoint: "127.0.0.1:9000", Bucket: "b"})
	require.ErrorContains(t, err, "S3_ENDPOINT")
	_, err = New(t.Context(), config.S3{Bucket: "b", AccessKeyID: "only-the-id"})
	require.ErrorContains(t, err, "S3_SECRET_ACCESS_KEY")
}
