package reconcile

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/aivedio/pipeline/shared/aggregate"
	"github.com/aivedio/pipeline/shared/asset"
	"github.com/aivedio/pipeline/shared/catalog"
	"github.com/aivedio/pipeline/shared/outbox"
	"github.com/aivedio/pipeline/shared/task"
)

// UploadReport counts what one scan did to uploads that stopped half-way.
type UploadReport struct {
	Expired  int // announced, never completed: FAILED upload.expired
	Rescued  int // probe re-emitted
	GaveUpOn int // probe re-emitted MaxRescues times, each taken by the probe stage, without moving: FAILED media.probe_stuck
}

// UploadSettlerConfig configures the [UploadSettler].
type UploadSettlerConfig struct {
	// Interval is how often Run makes a pass; DefaultInterval when zero.
	Interval time.Duration
	// Batch bounds the uploads one pass expires, and those it rescues;
	// DefaultBatch.
	Batch int
	// MaxRescues is DefaultMaxRescues when zero.
	MaxRescues int
}

// UploadSettler ends the uploads whose file never came, and re-emits the
// probe of those that stay PROCESSING (its event was lost, or its stage
// keeps failing). Once MaxRescues re-emissions reached the probe stage (its
// inbox or quarantine holds them) and the upload still did not move, it
// fails with a reason: no upload stays non-terminal for ever, and none
// fails for an outage, since a re-emission nobody took does not count.
type UploadSettler struct {
	loop
	p   Params
	cfg UploadSettlerConfig
}

// NewUploadSettler returns the upload settler over p, configured by
// p.Maintenance.Uploads.
func NewUploadSettler(p Params) *UploadSettler {
	p = defaults(p)
	cfg := p.Maintenance.Uploads
	cfg.Batch = cmp.Or(cfg.Batch, DefaultBatch)
	cfg.MaxRescues = cmp.Or(cfg.MaxRescues, DefaultMaxRescues)
	return &UploadSettler{loop: newLoop("upload_settler", cfg.Interval, p.Logger), p: p, cfg: cfg}
}

// Run makes a pass every Interval until ctx ends.
func (s *UploadSettler) Run(ctx context.Context) error {
	return s.run(ctx, func(ctx context.Context) error { _, err := s.RunOnce(ctx); return err })
}

// RunOnce makes one pass at the clock's time.
func (s *UploadSettler) RunOnce(ctx context.Context) (UploadReport, error) {
	return s.pass(ctx, clock(s.p))
}

func (s *UploadSettler) pass(ctx context.Context, now time.Time) (UploadReport, error) {
	var rep UploadReport
	j := s.p.Journey
	msg := fmt.Sprintf("no file was completed within UPLOAD_EXPIRY (%s) of the announcement; announce the file again under a new Idempotency-Key", j.UploadExpiry)
	err := pgx.BeginFunc(ctx, s.p.Pool, func(tx pgx.Tx) error {
		expired, err := asset.ExpireUploads(ctx, tx, now.Add(-j.UploadExpiry), s.cfg.Batch, msg)
		if err != nil {
			return err
		}
		for _, a := range expired {
			if err := record(ctx, tx, repair{Kind: RepairUploadExpire, AggregateType: task.AssetAggregateType, AggregateID: a.ID.String(),
				Reason: "upload.expired: " + msg}); err != nil {
				return err
			}
		}
		rep.Expired = len(expired)
		return nil
	})
	if err != nil {
		return rep, err
	}
	stuck, err := asset.StuckUploads(ctx, s.p.Pool, now.Add(-j.StuckAfter), s.cfg.Batch)
	if err != nil {
		return rep, err
	}
	for _, id := range stuck {
		var one UploadReport
		if err := pgx.BeginFunc(ctx, s.p.Pool, func(tx pgx.Tx) error { one = UploadReport{}; return s.rescue(ctx, tx, id, now, &one) }); err != nil {
			return rep, fmt.Errorf("rescue upload %s: %w", id, err)
		}
		rep.Rescued += one.Rescued
		rep.GaveUpOn += one.GaveUpOn
	}
	return rep, nil
}

// rescue re-emits the probe of upload id, or fails it once enough
// re-emissions reached the probe stage, if it is, as locked, still
// PROCESSING and untouched since the stuck deadline: otherwise it moved
// since the scan read it, and the rescue is stale.
func (s *UploadSettler) rescue(ctx context.Context, tx pgx.Tx, id uuid.UUID, now time.Time, rep *UploadReport) error {
	stuck := asset.Guard(asset.Processing)
	stuck.If = func(a asset.Asset) bool { return a.UpdatedAt.Before(now.Add(-s.p.Journey.StuckAfter)) }
	_, err := aggregate.Apply(ctx, tx, asset.Upload, id, stuck, func(ctx context.Context, tx pgx.Tx, a asset.Asset) (aggregate.Result, error) {
		// A probe still in the outbox is on its way: re-emitting adds
		// nothing and must not count.
		if pending, err := outbox.PendingFor(ctx, tx, a.ID.String()); err != nil || pending {
			return aggregate.Stale, err
		}
		took, err := lastProbeTaken(ctx, tx, a.ID)
		if err != nil {
			return 0, err
		}
		if rescues := a.Rescues + btoi(took); rescues >= s.cfg.MaxRescues {
			rep.GaveUpOn++
			if err := asset.NoteRescue(ctx, tx, id, took); err != nil { // the count the failure names
				return 0, err
			}
			s.p.Logger.WarnContext(ctx, "upload probe stuck", slog.String("asset_id", id.String()), slog.Int("rescues", rescues))
			msg := fmt.Sprintf("the probe of the upload did not finish after %d re-emissions that reached the probe stage; the probe stage's logs and the quarantine (adapter quarantine list --consumer %s) say why",
				rescues, catalog.GroupProbe.Name)
			if err := asset.Fail(ctx, tx, id, "media.probe_stuck", msg); err != nil {
				return 0, err
			}
			return aggregate.Applied, record(ctx, tx, repair{Kind: RepairUploadGiveUp, AggregateType: task.AssetAggregateType, AggregateID: id.String(), Reason: "media.probe_stuck: " + msg})
		}
		e, err := scanOrigin.EmitFor(task.Aggregate{Type: task.AssetAggregateType, ID: a.ID, TenantID: a.TenantID},
			task.Postprocess{AssetID: a.ID, Step: catalog.TagProbe})
		if err != nil {
			return 0, err
		}
		if err := outbox.Write(ctx, tx, e); err != nil {
			return 0, err
		}
		rep.Rescued++
		if err := record(ctx, tx, repair{Kind: RepairUploadRescue, AggregateType: task.AssetAggregateType, AggregateID: id.String(),
			Reason: "the upload stayed PROCESSING: probe re-emitted", Rescue: true}); err != nil {
			return 0, err
		}
		return aggregate.Applied, asset.NoteRescue(ctx, tx, id, took)
	})
	return err
}

// lastProbeTaken reports whether the scanner's last probe re-emission for
// the asset reached a stage; false when there was none.
func lastProbeTaken(ctx context.Context, tx pgx.Tx, id uuid.UUID) (bool, error) {
	var eventID uuid.UUID
	var topicName, tag string
	err := tx.QueryRow(ctx, `SELECT event_id, topic, tag FROM outbox_events
		WHERE aggregate_id = $1 AND producer = 'reconcile' AND published_at IS NOT NULL
		ORDER BY created_at DESC, event_id DESC LIMIT 1`, id.String()).Scan(&eventID, &topicName, &tag)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("read the last probe re-emission of upload %s: %w", id, err)
	}
	return taken(ctx, tx, eventID, topicName, tag)
}
