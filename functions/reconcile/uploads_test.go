package reconcile_test

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/functions/stage/stagetest"
	"github.com/aivedio/pipeline/shared/asset"
	"github.com/aivedio/pipeline/shared/catalog"
)

// TestScanSettlesUploadsThatStoppedHalfWay: an announced upload whose file
// never came fails after UPLOAD_EXPIRY; one whose probe was lost gets its
// probe again, however often nobody takes it (the broker or the probe
// stage is down); once maxRescues of them reached the probe stage and the
// upload still did not move, it fails with a reason.
func TestScanSettlesUploadsThatStoppedHalfWay(t *testing.T) {
	t.Parallel()
	b := scanSetup(t)
	store := stagetest.NewStore(t)
	file := filepath.Join(t.TempDir(), "clip.mp4")
	require.NoError(t, os.WriteFile(file, []byte("bytes"), 0o600))
	abandoned := stagetest.NewUpload(t, b.pool, store, b.tenantID, asset.Video, file, asset.PendingUpload)
	lost := stagetest.NewUpload(t, b.pool, store, b.tenantID, asset.Video, file, asset.Processing)
	fresh := stagetest.NewUpload(t, b.pool, store, b.tenantID, asset.Video, file, asset.Processing)
	age := func(id any, d time.Duration) {
		_, err := b.pool.Exec(t.Context(), `UPDATE assets SET updated_at = now() - $2 * interval '1 second' WHERE asset_id = $1`, id, d.Seconds())
		require.NoError(t, err)
	}
	age(abandoned.ID, scanJourney.UploadExpiry+time.Minute)
	age(lost.ID, scanJourney.StuckAfter+time.Minute)

	rep, err := b.scanner.Scan(t.Context())
	require.NoError(t, err)
	require.Equal(t, 1, rep.Uploads.Expired)
	require.Equal(t, 1, rep.Uploads.Rescued)
	got, err := asset.Get(t.Context(), b.pool, abandoned.ID)
	require.NoError(t, err)
	require.Equal(t, asset.Failed, got.Status)
	require.Equal(t, "upload.expired", got.ErrorCode)
	var probes int
	require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT count(*) FROM outbox_events WHERE aggregate_id = $1 AND tag = $2`,
		lost.ID.String(), catalog.TagProbe).Scan(&probes))
	require.Equal(t, 1, probes)
	got, err = asset.Get(t.Context(), b.pool, fresh.ID)
	require.NoError(t, err)
	require.Equal(t, asset.Processing, got.Status, "a probe on its way is left alone")

	age(lost.ID, scanJourney.StuckAfter+time.Minute)
	rep, err = b.scanner.Scan(t.Context())
	require.NoError(t, err)
	require.Zero(t, rep.Uploads.Rescued, "a probe still in the outbox is on its way: not re-emitted, not counted")
	publish := func() {
		_, err := b.pool.Exec(t.Context(), `UPDATE outbox_events SET published_at = now() WHERE published_at IS NULL`)
		require.NoError(t, err)
	}
	for i := range 6 {
		// The relay published the probe; nobody received it.
		publish()
		age(lost.ID, scanJourney.StuckAfter+time.Minute)
		rep, err = b.scanner.Scan(t.Context())
		require.NoError(t, err)
		require.Equal(t, 1, rep.Uploads.Rescued, "round %d: re-emitted, not counted", i)
		require.Zero(t, rep.Uploads.GaveUpOn, "round %d", i)
	}
	got, err = asset.Get(t.Context(), b.pool, lost.ID)
	require.NoError(t, err)
	require.Equal(t, asset.Processing, got.Status, "an outage fails no upload")
	require.Zero(t, got.Rescues)
	for range 3 {
		// The probe stage took the probe and never finished it.
		var last string
		require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT event_id FROM outbox_events WHERE aggregate_id = $1 AND published_at IS NULL`,
			lost.ID.String()).Scan(&last))
		publish()
		_, err := b.pool.Exec(t.Context(), `INSERT INTO inbox_dedup (consumer_name, event_id, result_code, payload_hash)
			VALUES ($1, $2, 'STALE_NOOP', $3)`, catalog.GroupProbe.Name, last, make([]byte, 32))
		require.NoError(t, err)
		age(lost.ID, scanJourney.StuckAfter+time.Minute)
		_, err = b.scanner.Scan(t.Context())
		require.NoError(t, err)
	}
	got, err = asset.Get(t.Context(), b.pool, lost.ID)
	require.NoError(t, err)
	require.Equal(t, asset.Failed, got.Status)
	require.Equal(t, "media.probe_stuck", got.ErrorCode)
	require.Contains(t, got.ErrorMessage, catalog.GroupProbe.Name)
	require.Equal(t, 3, got.Rescues)
}

// TestUploadProbesTakenAtOnceCountOnce: probes re-emitted during an
// outage that the probe stage takes all at once, when it is back, are one
// round of evidence, not one per probe: the upload fails only after
// maxRescues passes each found the probe it re-emitted last taken.
func TestUploadProbesTakenAtOnceCountOnce(t *testing.T) {
	t.Parallel()
	b := scanSetup(t)
	store := stagetest.NewStore(t)
	file := filepath.Join(t.TempDir(), "clip.mp4")
	require.NoError(t, os.WriteFile(file, []byte("bytes"), 0o600))
	lost := stagetest.NewUpload(t, b.pool, store, b.tenantID, asset.Video, file, asset.Processing)
	scan := func() {
		t.Helper()
		_, err := b.pool.Exec(t.Context(), `UPDATE outbox_events SET published_at = now() WHERE published_at IS NULL`)
		require.NoError(t, err)
		_, err = b.pool.Exec(t.Context(), `UPDATE assets SET updated_at = now() - $2 * interval '1 second' WHERE asset_id = $1`,
			lost.ID, (scanJourney.StuckAfter + time.Minute).Seconds())
		require.NoError(t, err)
		_, err = b.scanner.Scan(t.Context())
		require.NoError(t, err)
	}
	take := func() {
		t.Helper()
		_, err := b.pool.Exec(t.Context(), `UPDATE outbox_events SET published_at = now() WHERE published_at IS NULL`)
		require.NoError(t, err)
		_, err = b.pool.Exec(t.Context(), `INSERT INTO inbox_dedup (consumer_name, event_id, result_code, payload_hash)
			SELECT $1, event_id, 'STALE_NOOP', $3 FROM outbox_events WHERE aggregate_id = $2 AND tag = $4 ON CONFLICT DO NOTHING`,
			catalog.GroupProbe.Name, lost.ID.String(), make([]byte, 32), catalog.TagProbe)
		require.NoError(t, err)
	}
	for range 2 * maxRescues {
		scan() // nobody receives the probes
	}
	take() // the probe stage is back and takes them all
	scan()
	got, err := asset.Get(t.Context(), b.pool, lost.ID)
	require.NoError(t, err)
	require.Equal(t, asset.Processing, got.Status, "%d probes taken at once are one round", 2*maxRescues)
	for range maxRescues - 1 {
		take()
		scan()
	}
	got, err = asset.Get(t.Context(), b.pool, lost.ID)
	require.NoError(t, err)
	require.Equal(t, asset.Failed, got.Status)
	require.Equal(t, "media.probe_stuck", got.ErrorCode)
	require.Contains(t, got.ErrorMessage, fmt.Sprintf("after %d re-emissions", maxRescues))
}
