package api_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/functions/api"
	"github.com/aivedio/pipeline/functions/stage/stagetest"
	"github.com/aivedio/pipeline/local/embedded"
	"github.com/aivedio/pipeline/shared/asset"
	"github.com/aivedio/pipeline/shared/blob"
	"github.com/aivedio/pipeline/shared/catalog"
	"github.com/aivedio/pipeline/shared/config"
	"github.com/aivedio/pipeline/shared/dbtest"
	"github.com/aivedio/pipeline/shared/media/mediatest"
	"github.com/aivedio/pipeline/shared/tenant"
	"net/http/httptest"
)

// setupUploads starts a server whose uploads and downloads go to the test
// S3 server.
func setupUploads(t *testing.T) (*testBundle, *blob.Store) {
	t.Helper()
	store := stagetest.NewStore(t)
	b := setupWith(t, dbtest.TestSchema(t), stagetest.NewRedis(t), func(o *api.Options) {
		o.Blob, o.Uploads = store, store
	})
	return b, store
}

// announce posts an upload of body under idem.
func (b *testBundle) announce(t *testing.T, key, idem string, body []byte, kind, contentType string) response {
	t.Helper()
	sum := sha256.Sum256(body)
	return b.do(t, http.MethodPost, "/v1/assets", key, fmt.Sprintf(`{"kind":%q,"content_type":%q,"size_bytes":%d,"sha256":%q,"filename":"clip.mp4"}`,
		kind, contentType, len(body), hex.EncodeToString(sum[:])), "Idempotency-Key", idem, "Content-Type", "application/json")
}

// putUpload sends body the way the client is told to.
func putUpload(t *testing.T, upload map[string]any, body []byte) int {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), upload["method"].(string), upload["url"].(string), bytes.NewReader(body))
	require.NoError(t, err)
	for name, value := range upload["headers"].(map[string]any) {
		req.Header.Set(name, value.(string))
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	require.NoError(t, resp.Body.Close())
	return resp.StatusCode
}

// TestUploadJourney: announce, PUT straight to storage, complete; the
// asset is PROCESSING with a probe on its way, and reads back with what it
// promised. A repeat of the announcement finds the same asset.
func TestUploadJourney(t *testing.T) {
	t.Parallel()
	b, store := setupUploads(t)
	_, key := b.tenant(t, 100, tenant.RoleTenant)
	body := bytes.Repeat([]byte("not really a video, but bytes "), 100)
	idem := uuid.NewString()

	r := b.announce(t, key, idem, body, "VIDEO", "video/mp4")
	require.Equal(t, http.StatusCreated, r.status, "body: %s", r.body)
	created := r.json(t)
	require.Equal(t, "PENDING_UPLOAD", created["status"])
	id := created["asset_id"].(string)
	upload := created["upload"].(map[string]any)
	require.Equal(t, "PUT", upload["method"])
	t.Cleanup(func() {
		a, err := asset.Get(t.Context(), b.pool, uuid.MustParse(id))
		if err == nil {
			_ = store.Delete(t.Context(), a.ObjectKey)
		}
	})

	again := b.announce(t, key, idem, body, "VIDEO", "video/mp4")
	require.Equal(t, http.StatusOK, again.status, "body: %s", again.body)
	require.Equal(t, id, again.json(t)["asset_id"], "the same announcement finds the same asset")
	other := b.announce(t, key, idem, append(bytes.Clone(body), '!'), "VIDEO", "video/mp4")
	require.Equal(t, http.StatusConflict, other.status)
	require.Equal(t, api.CodeIdempotencyConflict, other.errorCode(t))

	early := b.do(t, http.MethodPost, "/v1/assets/"+id+"/complete", key, "")
	require.Equal(t, http.StatusConflict, early.status, "body: %s", early.body)
	require.Equal(t, api.CodeNotUploaded, early.errorCode(t))

	require.Equal(t, http.StatusOK, putUpload(t, upload, body))
	done := b.do(t, http.MethodPost, "/v1/assets/"+id+"/complete", key, "")
	require.Equal(t, http.StatusAccepted, done.status, "body: %s", done.body)
	require.Equal(t, "PROCESSING", done.json(t)["status"])
	var probes int
	require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT count(*) FROM outbox_events WHERE aggregate_type = 'asset' AND aggregate_id = $1 AND tag = $2`,
		id, catalog.TagProbe).Scan(&probes))
	require.Equal(t, 1, probes)
	twice := b.do(t, http.MethodPost, "/v1/assets/"+id+"/complete", key, "")
	require.Equal(t, http.StatusAccepted, twice.status)
	require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT count(*) FROM outbox_events WHERE aggregate_id = $1`, id).Scan(&probes))
	require.Equal(t, 1, probes, "a repeated complete asks for no second probe")

	got := b.do(t, http.MethodGet, "/v1/assets/"+id, key, "")
	require.Equal(t, http.StatusOK, got.status)
	view := got.json(t)
	sum := sha256.Sum256(body)
	require.Equal(t, "VIDEO", view["kind"])
	require.Equal(t, "UPLOAD", view["role"])
	require.Equal(t, "PROCESSING", view["status"])
	require.Equal(t, hex.EncodeToString(sum[:]), view["sha256"])
	require.EqualValues(t, len(body), view["size_bytes"])
	require.Equal(t, "clip.mp4", view["filename"])
	require.Empty(t, view["download_url"], "no download before the asset is READY")
	require.Equal(t, []any{}, view["derivatives"])
}

// TestUploadMismatchIsRefused: bytes other than the announced ones are
// refused at complete (by the storage server at the PUT already, when it
// checks checksums), and the asset waits for the right file.
func TestUploadMismatchIsRefused(t *testing.T) {
	t.Parallel()
	b, store := setupUploads(t)
	tenantID, key := b.tenant(t, 100, tenant.RoleTenant)
	body := bytes.Repeat([]byte("x"), 4096)
	r := b.announce(t, key, uuid.NewString(), body, "VIDEO", "video/mp4")
	require.Equal(t, http.StatusCreated, r.status, "body: %s", r.body)
	id := uuid.MustParse(r.json(t)["asset_id"].(string))
	objectKey, err := blob.AssetKey(tenantID.String(), id.String(), "original")
	require.NoError(t, err)
	t.Cleanup(func() { _ = store.Delete(t.Context(), objectKey) })

	// Bytes of the right size, but not the file announced, stored behind
	// the presigned URL's back.
	_, err = store.Put(t.Context(), objectKey, bytes.NewReader(bytes.Repeat([]byte("y"), 4096)), nil)
	require.NoError(t, err)
	done := b.do(t, http.MethodPost, "/v1/assets/"+id.String()+"/complete", key, "")
	require.Equal(t, http.StatusUnprocessableEntity, done.status, "body: %s", done.body)
	require.Equal(t, api.CodeUploadMismatch, done.errorCode(t))
	require.Contains(t, done.message(t), "sha256")
	_, err = store.Stat(t.Context(), objectKey)
	require.ErrorIs(t, err, blob.ErrNotFound, "the wrong bytes are removed")

	_, err = store.Put(t.Context(), objectKey, bytes.NewReader(body[:100]), nil)
	require.NoError(t, err)
	short := b.do(t, http.MethodPost, "/v1/assets/"+id.String()+"/complete", key, "")
	require.Equal(t, http.StatusUnprocessableEntity, short.status)
	require.Contains(t, short.message(t), "100 bytes")

	a, err := asset.Get(t.Context(), b.pool, id)
	require.NoError(t, err)
	require.Equal(t, asset.PendingUpload, a.Status, "the asset waits for the right file")
}

func TestUploadAnnouncementIsValidated(t *testing.T) {
	t.Parallel()
	b, _ := setupUploads(t)
	_, key := b.tenant(t, 100, tenant.RoleTenant)
	sum := sha256.Sum256([]byte("x"))
	good := hex.EncodeToString(sum[:])
	for _, c := range []struct{ body, want string }{
		{`{"kind":"MOVIE","content_type":"video/mp4","size_bytes":1,"sha256":"` + good + `","filename":"a.mp4"}`, "kind must be VIDEO, AUDIO or IMAGE"},
		{`{"kind":"VIDEO","content_type":"image/png","size_bytes":1,"sha256":"` + good + `","filename":"a.mp4"}`, "content_type must be a video/*"},
		{`{"kind":"IMAGE","content_type":"image/svg+xml","size_bytes":1,"sha256":"` + good + `","filename":"a.svg"}`, "image/svg+xml is not accepted"},
		{`{"kind":"VIDEO","content_type":"video/x-ms-asf","size_bytes":1,"sha256":"` + good + `","filename":"a.asf"}`, "accepted: video/mp4, video/quicktime"},
		{`{"kind":"VIDEO","content_type":"video/mp4","size_bytes":0,"sha256":"` + good + `","filename":"a.mp4"}`, "size_bytes must be from 1"},
		{`{"kind":"VIDEO","content_type":"video/mp4","size_bytes":1,"sha256":"abc","filename":"a.mp4"}`, "sha256 must be"},
		{`{"kind":"VIDEO","content_type":"video/mp4","size_bytes":1,"sha256":"` + good + `","filename":"../a.mp4"}`, "plain file name"},
		{`{"kind":"VIDEO","content_type":"video/mp4","size_bytes":1,"sha256":"` + good + `"}`, "filename is required"},
	} {
		r := b.do(t, http.MethodPost, "/v1/assets", key, c.body, "Idempotency-Key", uuid.NewString(), "Content-Type", "application/json")
		require.Equal(t, http.StatusBadRequest, r.status, "%s: %s", c.body, r.body)
		require.Contains(t, r.message(t), c.want)
	}
	noKey := b.do(t, http.MethodPost, "/v1/assets", key, `{}`, "Content-Type", "application/json")
	require.Equal(t, api.CodeInvalidIdempotencyKey, noKey.errorCode(t))
}

// TestAssetsOfATenant: a READY upload lists with its download link and
// its thumbnail; another tenant's asset reads exactly like a missing one;
// the listing pages newest first.
func TestAssetsOfATenant(t *testing.T) {
	t.Parallel()
	b, store := setupUploads(t)
	path := mediatest.Clip(t, mediatest.ClipParams{Duration: time.Second, Width: 160, Height: 120, Rate: 10})
	tenantID, key := stagetest.NewTenant(t, b.pool)
	a := stagetest.NewUpload(t, b.pool, store, tenantID, asset.Video, path, asset.Ready)
	thumbKey, err := blob.AssetKey(a.TenantID.String(), a.ID.String(), "thumbnail.jpg")
	require.NoError(t, err)
	_, err = asset.AddDerivative(t.Context(), b.pool, asset.NewDerivative{TenantID: a.TenantID, SourceID: a.ID, Kind: asset.KindThumbnail,
		ObjectKey: thumbKey, SHA256: a.SHA256, SizeBytes: 10, ContentType: "image/jpeg"})
	require.NoError(t, err)

	got := b.do(t, http.MethodGet, "/v1/assets/"+a.ID.String(), key, "")
	require.Equal(t, http.StatusOK, got.status, "body: %s", got.body)
	view := got.json(t)
	require.Equal(t, "READY", view["status"])
	require.NotEmpty(t, view["download_url"])
	derivatives := view["derivatives"].([]any)
	require.Len(t, derivatives, 1)
	require.Equal(t, "THUMBNAIL", derivatives[0].(map[string]any)["role"])
	require.Equal(t, "IMAGE", derivatives[0].(map[string]any)["kind"])

	_, strangerKey := b.tenant(t, 100, tenant.RoleTenant)
	hidden := b.do(t, http.MethodGet, "/v1/assets/"+a.ID.String(), strangerKey, "")
	missing := b.do(t, http.MethodGet, "/v1/assets/"+uuid.NewString(), strangerKey, "")
	require.Equal(t, http.StatusNotFound, hidden.status)
	require.Equal(t, missing.status, hidden.status)
	require.Equal(t, missing.errorCode(t), hidden.errorCode(t))

	for range 2 {
		r := b.announce(t, key, uuid.NewString(), []byte(uuid.NewString()), "AUDIO", "audio/mpeg")
		require.Equal(t, http.StatusCreated, r.status, "body: %s", r.body)
	}
	first := b.do(t, http.MethodGet, "/v1/assets?limit=2", key, "")
	require.Equal(t, http.StatusOK, first.status, "body: %s", first.body)
	page := first.json(t)
	require.Len(t, page["assets"], 2)
	require.NotEmpty(t, page["next_cursor"])
	rest := b.do(t, http.MethodGet, "/v1/assets?limit=2&cursor="+page["next_cursor"].(string), key, "")
	require.Equal(t, http.StatusOK, rest.status)
	last := rest.json(t)
	require.Len(t, last["assets"], 1)
	require.Equal(t, a.ID.String(), last["assets"].([]any)[0].(map[string]any)["asset_id"], "the oldest comes last")
	require.Empty(t, last["next_cursor"])

	bad := b.do(t, http.MethodGet, "/v1/assets?cursor=nope", key, "")
	require.Equal(t, http.StatusBadRequest, bad.status)
	none := b.do(t, http.MethodGet, "/v1/assets", strangerKey, "")
	require.Equal(t, []any{}, none.json(t)["assets"])
}

// TestUploadMismatchIsRefusedOnTheEmbeddedStore: on the object store `make
// run` embeds (gofakes3, which verifies no checksum), bytes PUT through
// the presigned URL that are not the file announced are refused by
// complete as 422 upload_mismatch, and the asset waits for the right file.
func TestUploadMismatchIsRefusedOnTheEmbeddedStore(t *testing.T) {
	t.Parallel()
	h, err := embedded.S3Handler(t.TempDir())
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	store, err := blob.New(t.Context(), config.S3{Endpoint: srv.URL, Region: "us-east-1", Bucket: "aivedio-media", AccessKeyID: "local", SecretAccessKey: "local"})
	require.NoError(t, err)
	require.NoError(t, store.EnsureBucket(t.Context()))
	b := setupWith(t, dbtest.TestSchema(t), stagetest.NewRedis(t), func(o *api.Options) { o.Blob, o.Uploads = store, store })
	_, key := b.tenant(t, 100, tenant.RoleTenant)
	body := bytes.Repeat([]byte("x"), 4096)
	r := b.announce(t, key, uuid.NewString(), body, "VIDEO", "video/mp4")
	require.Equal(t, http.StatusCreated, r.status, "body: %s", r.body)
	created := r.json(t)
	id := uuid.MustParse(created["asset_id"].(string))
	putUpload(t, created["upload"].(map[string]any), bytes.Repeat([]byte("y"), 4096))

	done := b.do(t, http.MethodPost, "/v1/assets/"+id.String()+"/complete", key, "")
	require.Equal(t, http.StatusUnprocessableEntity, done.status, "body: %s", done.body)
	require.Equal(t, api.CodeUploadMismatch, done.errorCode(t))
	a, err := asset.Get(t.Context(), b.pool, id)
	require.NoError(t, err)
	require.Equal(t, asset.PendingUpload, a.Status, "the asset waits for the right file")
}

// TestACompletedUploadCannotBeChangedThroughItsURL: complete copies the
// checked bytes to a key of their own, so a PUT through the upload URL
// afterwards (possible until it expires, and with other bytes on a store
// that verifies no checksum, as make run's embedded one) changes nothing
// the probe, a timeline or a download reads.
func TestACompletedUploadCannotBeChangedThroughItsURL(t *testing.T) {
	t.Parallel()
	h, err := embedded.S3Handler(t.TempDir())
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	store, err := blob.New(t.Context(), config.S3{Endpoint: srv.URL, Region: "us-east-1", Bucket: "aivedio-media", AccessKeyID: "local", SecretAccessKey: "local"})
	require.NoError(t, err)
	require.NoError(t, store.EnsureBucket(t.Context()))
	b := setupWith(t, dbtest.TestSchema(t), stagetest.NewRedis(t), func(o *api.Options) { o.Blob, o.Uploads = store, store })
	_, key := b.tenant(t, 100, tenant.RoleTenant)
	body := bytes.Repeat([]byte("x"), 4096)
	r := b.announce(t, key, uuid.NewString(), body, "VIDEO", "video/mp4")
	require.Equal(t, http.StatusCreated, r.status, "body: %s", r.body)
	created := r.json(t)
	id := uuid.MustParse(created["asset_id"].(string))
	upload := created["upload"].(map[string]any)
	require.Equal(t, http.StatusOK, putUpload(t, upload, body))
	done := b.do(t, http.MethodPost, "/v1/assets/"+id.String()+"/complete", key, "")
	require.Equal(t, http.StatusAccepted, done.status, "body: %s", done.body)

	require.Equal(t, http.StatusOK, putUpload(t, upload, bytes.Repeat([]byte("y"), 4096)), "the embedded store takes any bytes")
	a, err := asset.Get(t.Context(), b.pool, id)
	require.NoError(t, err)
	sum, err := store.ReadSHA256(t.Context(), a.ObjectKey)
	require.NoError(t, err)
	want := sha256.Sum256(body)
	require.Equal(t, hex.EncodeToString(want[:]), sum, "the asset's bytes are the ones complete checked")
}
