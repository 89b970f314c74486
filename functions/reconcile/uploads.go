package reconcile

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/aivedio/pipeline/shared/asset"
	"github.com/aivedio/pipeline/shared/catalog"
	"github.com/aivedio/pipeline/shared/outbox"
	"github.com/aivedio/pipeline/shared/task"
)

// UploadReport counts what one scan did to uploads that stopped half-way.
type UploadReport struct {
	Expired  int // announced, never completed: FAILED upload.expired
	Rescued  int // probe re-emitted
	GaveUpOn int // probe re-emitted maxRescues times, each taken by the probe stage, without moving: FAILED media.probe_stuck
}

// settleUploads ends the uploads whose file never came, and re-emits the
// probe of those that stay PROCESSING (its event was lost, or its stage
// keeps failing). Once maxRescues re-emissions reached the probe stage (its
// inbox or quarantine holds them) and the upload still did not move, it
// fails with a reason: no upload stays non-terminal for ever, and none
// fails for an outage, since a re-emission nobody took does not count.
func (r *reconciler) settleUploads(ctx context.Context, now time.Time) (UploadReport, error) {
	var rep UploadReport
	j := r.Journey
	expired, err := asset.ExpireUploads(ctx, r.Pool, now.Add(-j.UploadExpiry), scanBatch, fmt.Sprintf(
		"no file was completed within UPLOAD_EXPIRY (%s) of the announcement; announce the file again under a new Idempotency-Key", j.UploadExpiry))
	if err != nil {
		return rep, err
	}
	rep.Expired = len(expired)
	stuck, err := asset.StuckUploads(ctx, r.Pool, now.Add(-j.StuckAfter), scanBatch)
	if err != nil {
		return rep, err
	}
	for _, id := range stuck {
		if err := pgx.BeginFunc(ctx, r.Pool, func(tx pgx.Tx) error { return r.rescueUpload(ctx, tx, id, now, &rep) }); err != nil {
			return rep, fmt.Errorf("rescue upload %s: %w", id, err)
		}
	}
	return rep, nil
}

func (r *reconciler) rescueUpload(ctx context.Context, tx pgx.Tx, id uuid.UUID, now time.Time, rep *UploadReport) error {
	a, err := asset.Lock(ctx, tx, id)
	if err != nil {
		return err
	}
	if a.Status != asset.Processing || !a.UpdatedAt.Before(now.Add(-r.Journey.StuckAfter)) {
		return nil // it moved since the scan read it
	}
	// A probe still in the outbox is on its way (the relay or the broker
	// is slow or down): re-emitting adds nothing and must not count.
	var pending bool
	if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM outbox_events WHERE published_at IS NULL AND aggregate_id = $1)`,
		a.ID.String()).Scan(&pending); err != nil || pending {
		return err
	}
	took, err := lastProbeTaken(ctx, tx, a.ID)
	if err != nil {
		return err
	}
	if rescues := a.Rescues + btoi(took); rescues >= maxRescues {
		rep.GaveUpOn++
		if err := asset.NoteRescue(ctx, tx, id, took); err != nil { // the count the failure names
			return err
		}
		r.Logger.WarnContext(ctx, "upload probe stuck", slog.String("asset_id", id.String()), slog.Int("rescues", rescues))
		return asset.Fail(ctx, tx, id, "media.probe_stuck", fmt.Sprintf(
			"the probe of the upload did not finish after %d re-emissions that reached the probe stage; the probe stage's logs and the quarantine (adapter quarantine list --consumer %s) say why",
			rescues, catalog.GroupProbe.Name))
	}
	e, err := scanOrigin.EmitFor(task.Aggregate{Type: task.AssetAggregateType, ID: a.ID, TenantID: a.TenantID},
		task.Postprocess{AssetID: a.ID, Step: catalog.TagProbe})
	if err != nil {
		return err
	}
	if err := outbox.Write(ctx, tx, e); err != nil {
		return err
	}
	rep.Rescued++
	return asset.NoteRescue(ctx, tx, id, took)
}

// lastProbeTaken reports whether the scanner's last probe re-emission for
// the asset reached a stage; false when there was none.
func lastProbeTaken(ctx context.Context, tx pgx.Tx, id uuid.UUID) (bool, error) {
	var eventID uuid.UUID
	var topicName, tag string
	err := tx.QueryRow(ctx, `SELECT event_id, topic, tag FROM outbox_events
		WHERE aggregate_id = $1 AND producer = '`+Name+`' AND published_at IS NOT NULL
		ORDER BY created_at DESC, event_id DESC LIMIT 1`, id.String()).Scan(&eventID, &topicName, &tag)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("read the last probe re-emission of upload %s: %w", id, err)
	}
	return taken(ctx, tx, eventID, topicName, tag)
}
