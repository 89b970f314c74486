package api_test

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/functions/api"
	"github.com/aivedio/pipeline/functions/stage/stagetest"
	"github.com/aivedio/pipeline/shared/asset"
	"github.com/aivedio/pipeline/shared/blob"
	"github.com/aivedio/pipeline/shared/media"
)

// readyVideo records a READY 10 s upload of tenantID with a picture and
// sound, as the probe stage leaves it.
func (b *testBundle) readyVideo(t *testing.T, store *blob.Store, tenantID uuid.UUID) uuid.UUID {
	t.Helper()
	path := filepath.Join(t.TempDir(), "clip.mp4")
	require.NoError(t, os.WriteFile(path, []byte(uuid.NewString()), 0o600))
	a := stagetest.NewUpload(t, b.pool, store, tenantID, asset.Video, path, asset.Processing)
	require.NoError(t, asset.RecordProbe(t.Context(), b.pool, a.ID, media.Probe{Duration: 10 * time.Second,
		Video: &media.VideoStream{Codec: "h264", Width: 1280, Height: 720}, Audio: &media.AudioStream{Codec: "aac"}}))
	require.NoError(t, asset.MarkReady(t.Context(), b.pool, a.ID))
	return a.ID
}

func (b *testBundle) project(t *testing.T, key string) string {
	t.Helper()
	r := b.do(t, http.MethodPost, "/v1/projects", key, `{"name":"launch video"}`, "Content-Type", "application/json")
	require.Equal(t, http.StatusCreated, r.status, "body: %s", r.body)
	return r.json(t)["project_id"].(string)
}

func (b *testBundle) revise(t *testing.T, key, projectID, body string) response {
	t.Helper()
	return b.do(t, http.MethodPost, "/v1/projects/"+projectID+"/revisions", key, body, "Content-Type", "application/json")
}

// TestRevisionsAreImmutableAndFoundAgain: a shorthand timeline and an
// OpenTimelineIO file each lower to a revision with their own timing rule;
// the same content again is the same revision.
func TestRevisionsAreImmutableAndFoundAgain(t *testing.T) {
	t.Parallel()
	b, store := setupUploads(t)
	tenantID, key := stagetest.NewTenant(t, b.pool)
	a, c := b.readyVideo(t, store, tenantID), b.readyVideo(t, store, tenantID)
	projectID := b.project(t, key)

	shorthand := fmt.Sprintf(`{"timeline":{"clips":[{"asset_id":%q,"in":1,"out":4},{"asset_id":%q,"in":2,"out":6,"transition_in":{"type":"dissolve","duration":1}}],
		"titles":[{"text":"Hello","start":0.5,"end":2.5}]}}`, a, c)
	r := b.revise(t, key, projectID, shorthand)
	require.Equal(t, http.StatusCreated, r.status, "body: %s", r.body)
	first := r.json(t)
	require.EqualValues(t, 6, first["duration_seconds"], "3 + 4 - the 1 s dissolve")
	again := b.revise(t, key, projectID, strings.ReplaceAll(shorthand, `"in":1,`, `"in":1.0, `))
	require.Equal(t, http.StatusOK, again.status, "body: %s", again.body)
	require.Equal(t, first["revision_id"], again.json(t)["revision_id"], "the same content is the same revision")

	raw, err := os.ReadFile(filepath.Join("..", "..", "shared", "timeline", "testdata", "three_clips.otio"))
	require.NoError(t, err)
	doc := strings.NewReplacer("0190c0de-0000-7000-8000-00000000000a", a.String(), "0190c0de-0000-7000-8000-00000000000b", c.String(),
		"0190c0de-0000-7000-8000-00000000000c", a.String(), "0190c0de-0000-7000-8000-0000000000aa", c.String()).Replace(string(raw))
	r = b.revise(t, key, projectID, `{"otio":`+doc+`}`)
	require.Equal(t, http.StatusCreated, r.status, "body: %s", r.body)
	otio := r.json(t)
	require.EqualValues(t, 10, otio["duration_seconds"], "an OTIO dissolve keeps the track's duration")
	require.Equal(t, "otio", otio["format"])

	got := b.do(t, http.MethodGet, "/v1/projects/"+projectID+"/revisions/"+otio["revision_id"].(string), key, "")
	require.Equal(t, http.StatusOK, got.status, "body: %s", got.body)
	spec := got.json(t)["spec"].(map[string]any)
	require.Len(t, spec["clips"], 4)
	require.Len(t, spec["transitions"], 1)

	listing := b.do(t, http.MethodGet, "/v1/projects/"+projectID, key, "")
	require.Len(t, listing.json(t)["revisions"], 2)
	// Pages of summaries, oldest first: no source, no spec.
	page := b.do(t, http.MethodGet, "/v1/projects/"+projectID+"?limit=1", key, "").json(t)
	revs := page["revisions"].([]any)
	require.Len(t, revs, 1)
	require.Equal(t, first["revision_id"], revs[0].(map[string]any)["revision_id"])
	require.NotContains(t, revs[0], "spec")
	cursor, _ := page["next_cursor"].(string)
	require.NotEmpty(t, cursor)
	page = b.do(t, http.MethodGet, "/v1/projects/"+projectID+"?limit=1&cursor="+cursor, key, "").json(t)
	require.Equal(t, otio["revision_id"], page["revisions"].([]any)[0].(map[string]any)["revision_id"])
	require.NotContains(t, page, "next_cursor", "the last page")
	bad := b.do(t, http.MethodGet, "/v1/projects/"+projectID+"?cursor=nope", key, "")
	require.Equal(t, http.StatusBadRequest, bad.status, "body: %s", bad.body)

	_, strangerKey := stagetest.NewTenant(t, b.pool)
	hidden := b.do(t, http.MethodGet, "/v1/projects/"+projectID, strangerKey, "")
	require.Equal(t, http.StatusNotFound, hidden.status)
}

func TestInvalidTimelinesNameTheElement(t *testing.T) {
	t.Parallel()
	b, store := setupUploads(t)
	tenantID, key := stagetest.NewTenant(t, b.pool)
	a := b.readyVideo(t, store, tenantID)
	strangerID, _ := stagetest.NewTenant(t, b.pool)
	foreign := b.readyVideo(t, store, strangerID)
	path := filepath.Join(t.TempDir(), "clip.mp4")
	require.NoError(t, os.WriteFile(path, []byte("x"), 0o600))
	pending := stagetest.NewUpload(t, b.pool, store, tenantID, asset.Video, path, asset.Processing).ID
	projectID := b.project(t, key)
	clip := func(id uuid.UUID, in, out float64) string {
		return fmt.Sprintf(`{"asset_id":%q,"in":%g,"out":%g}`, id, in, out)
	}
	for _, c := range []struct {
		body   string
		status int
		says   string
	}{
		{`{"timeline":{"clips":[` + clip(uuid.New(), 0, 1) + `]}}`, 422, "timeline.clips[0].asset_id: asset"},
		{`{"timeline":{"clips":[` + clip(foreign, 0, 1) + `]}}`, 422, "does not exist"},
		{`{"timeline":{"clips":[` + clip(pending, 0, 1) + `]}}`, 422, "not READY"},
		{`{"timeline":{"clips":[` + clip(a, 2, 1) + `]}}`, 422, "timeline.clips[0]: in (2.000s) must be before out"},
		{`{"timeline":{"clips":[` + clip(a, 0, 11) + `]}}`, 422, "past the end"},
		{`{"timeline":{"clips":[` + clip(a, 0, 1) + `],"audio":{"asset_id":"` + a.String() + `","gain_db":30}}}`, 422, "timeline.audio.gain_db"},
		{`{"timeline":{"clips":[{"asset_id":"` + a.String() + `","in":0,"out":1,"speed":2}]}}`, 400, "unknown field"},
		{`{"timeline":{"clips":[]},"otio":{}}`, 400, "exactly one of timeline"},
		{`{}`, 400, "exactly one of timeline"},
		{`{"otio":{"OTIO_SCHEMA":"Clip.2"}}`, 422, "otio.OTIO_SCHEMA"},
	} {
		r := b.revise(t, key, projectID, c.body)
		require.Equal(t, c.status, r.status, "%s: %s", c.body, r.body)
		require.Contains(t, []string{api.CodeInvalidTimeline, api.CodeInvalidField}, r.errorCode(t))
		require.Contains(t, r.message(t), c.says, c.body)
	}
}
