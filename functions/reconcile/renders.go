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
	"github.com/aivedio/pipeline/shared/catalog"
	"github.com/aivedio/pipeline/shared/outbox"
	"github.com/aivedio/pipeline/shared/render"
	"github.com/aivedio/pipeline/shared/task"
)

// RenderReport counts what one scan did to renders that stopped moving.
type RenderReport struct {
	Rescued  int // a step re-asked: a queued render's start, chunks past their lease or lost, the join
	Settled  int // a finished render's lost settle re-emitted
	GaveUpOn int // re-asks handled MaxRescues times without progress, none for GiveUpAfter: FAILED render.stuck
	Waiting  int // a re-ask due, held back by its spacing
}

// RenderSettlerConfig configures the [RenderSettler].
type RenderSettlerConfig struct {
	// Interval is how often Run makes a pass; DefaultInterval when zero.
	Interval time.Duration
	// Batch bounds the renders one pass re-asks, and those it settles
	// again; DefaultBatch.
	Batch int
	// MaxRescues is DefaultMaxRescues when zero.
	MaxRescues int
}

// RenderSettler re-asks the steps of renders whose progress was lost: a
// queued render whose start never came, chunks whose claim ran out (the
// delivery rendering them died) or whose event was lost, a render whose
// chunks are all stored but whose join did not finish. Finished renders
// whose reservation is still held get their settle again.
//
// No render stays non-terminal for ever, and none fails for an outage: a
// render FAILS render.stuck only when MaxRescues of its re-asks reached
// the render stage and changed nothing (its inbox holds them, or a chunk
// was claimed after them), and it has not progressed for GiveUpAfter. A
// re-ask nobody received (the broker down, its consumers deaf) proves
// nothing and is not counted; re-asks are spaced, each twice as long after
// the one before, so an outage costs a few of them.
type RenderSettler struct {
	loop
	p   Params
	cfg RenderSettlerConfig
}

// NewRenderSettler returns the render settler over p, configured by
// p.Maintenance.Renders.
func NewRenderSettler(p Params) *RenderSettler {
	p = defaults(p)
	cfg := p.Maintenance.Renders
	cfg.Batch = cmp.Or(cfg.Batch, DefaultBatch)
	cfg.MaxRescues = cmp.Or(cfg.MaxRescues, DefaultMaxRescues)
	return &RenderSettler{loop: newLoop("render_settler", cfg.Interval, p.Logger), p: p, cfg: cfg}
}

// Run makes a pass every Interval until ctx ends.
func (s *RenderSettler) Run(ctx context.Context) error {
	return s.run(ctx, func(ctx context.Context) error { _, err := s.RunOnce(ctx); return err })
}

// RunOnce makes one pass at the clock's time.
func (s *RenderSettler) RunOnce(ctx context.Context) (RenderReport, error) {
	return s.pass(ctx, clock(s.p))
}

func (s *RenderSettler) pass(ctx context.Context, now time.Time) (RenderReport, error) {
	var rep RenderReport
	stuck := now.Add(-s.p.Journey.StuckAfter)
	rows, err := s.p.Pool.Query(ctx, `SELECT render_job_id FROM render_jobs j
		WHERE (status = 'QUEUED' AND updated_at < $1)
			OR (status = 'RENDERING' AND (updated_at < $1 OR EXISTS (SELECT 1 FROM render_chunks c
				WHERE c.tenant_id = j.tenant_id AND c.render_key = j.render_key AND c.status = 'RENDERING' AND c.lease_until < $2)))
		ORDER BY updated_at LIMIT $3`, stuck, now, s.cfg.Batch)
	if err != nil {
		return rep, fmt.Errorf("scan renders: %w", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	if err != nil {
		return rep, fmt.Errorf("scan renders: %w", err)
	}
	for _, id := range ids {
		// One render that cannot be rescued now must not hold back the
		// ones behind it.
		if err := pgx.BeginFunc(ctx, s.p.Pool, func(tx pgx.Tx) error { return s.rescue(ctx, tx, id, now, &rep) }); err != nil {
			if ctx.Err() != nil {
				return rep, err
			}
			s.p.Logger.WarnContext(ctx, "render not rescued this scan", slog.String("render_id", id.String()), slog.String("error", err.Error()))
		}
	}
	rows, err = s.p.Pool.Query(ctx, `SELECT j.render_job_id FROM render_jobs j JOIN credit_reservations r ON r.render_job_id = j.render_job_id
		WHERE j.status IN ('SUCCEEDED', 'FAILED', 'CANCELED') AND r.status = 'HELD' AND j.updated_at < $1
			AND NOT EXISTS (SELECT 1 FROM outbox_events o WHERE o.published_at IS NULL AND o.aggregate_id = j.render_job_id::text)
		ORDER BY j.updated_at LIMIT $2`, stuck, s.cfg.Batch)
	if err != nil {
		return rep, fmt.Errorf("scan unsettled renders: %w", err)
	}
	unsettled, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	if err != nil {
		return rep, fmt.Errorf("scan unsettled renders: %w", err)
	}
	// A finished render stays finished: the precondition names what the
	// scan found, under the lock.
	over := render.Guard(render.Succeeded, render.Failed, render.Canceled)
	for _, id := range unsettled {
		var res aggregate.Result
		err := pgx.BeginFunc(ctx, s.p.Pool, func(tx pgx.Tx) (err error) {
			res, err = aggregate.Apply(ctx, tx, render.Kind, id, over, func(ctx context.Context, tx pgx.Tx, j render.Job) (aggregate.Result, error) {
				return aggregate.Applied, s.settle(ctx, tx, j)
			})
			return err
		})
		if err != nil {
			if ctx.Err() != nil {
				return rep, err
			}
			s.p.Logger.WarnContext(ctx, "render not settled again this scan", slog.String("render_id", id.String()), slog.String("error", err.Error()))
			continue
		}
		if res == aggregate.Applied {
			rep.Settled++
		}
	}
	return rep, nil
}

// settle re-emits the settle of finished render j, which still holds its
// reservation: its settle was lost.
func (s *RenderSettler) settle(ctx context.Context, tx pgx.Tx, j render.Job) error {
	e, err := scanOrigin.EmitFor(j.Aggregate(), task.SettleRequested{RenderID: j.ID, Status: task.Status(j.Status)})
	if err != nil {
		return err
	}
	// The touch makes the next re-emission wait another deadline.
	if _, err := render.Move(ctx, tx, j, render.Change{}); err != nil {
		return err
	}
	ctx, span, err := render.ContinueTrace(ctx, tx, j.ID, "reconcile render settle")
	defer span.End()
	if err != nil {
		return err
	}
	if err := outbox.Write(ctx, tx, e); err != nil {
		return err
	}
	return record(ctx, tx, repair{Kind: RepairRenderResettle, AggregateType: task.RenderAggregateType, AggregateID: j.ID.String(),
		Reason: fmt.Sprintf("the render is %s and still holds its reservation: its settle was lost", j.Status)})
}

// rescue re-asks the lost steps of render id, or fails it once enough
// re-asks reached the render stage without progress, if it is, as locked,
// still running (and a queued one untouched since the stuck deadline):
// otherwise it moved since the scan read it, and the rescue is stale.
func (s *RenderSettler) rescue(ctx context.Context, tx pgx.Tx, id uuid.UUID, now time.Time, rep *RenderReport) error {
	stuck := now.Add(-s.p.Journey.StuckAfter)
	running := render.Guard(render.Queued, render.Rendering)
	running.If = func(j render.Job) bool { return j.Status != render.Queued || j.UpdatedAt.Before(stuck) }
	_, err := aggregate.Apply(ctx, tx, render.Kind, id, running, func(ctx context.Context, tx pgx.Tx, j render.Job) (aggregate.Result, error) {
		return s.reask(ctx, tx, j, now, rep)
	})
	return err
}

// reask is the work of a rescue on j as locked.
func (s *RenderSettler) reask(ctx context.Context, tx pgx.Tx, j render.Job, now time.Time, rep *RenderReport) (aggregate.Result, error) {
	ctx, span, err := render.ContinueTrace(ctx, tx, j.ID, "reconcile render "+string(j.Status))
	defer span.End()
	if err != nil {
		return 0, err
	}
	// An event still in the outbox is on its way: re-asking adds nothing
	// and must not count.
	if pending, err := outbox.PendingFor(ctx, tx, j.ID.String()); err != nil || pending {
		return aggregate.Stale, err
	}
	stuck := now.Add(-s.p.Journey.StuckAfter)
	var asks []outbox.Event
	ask := func(step string, chunk int) error {
		e, err := j.Ask(scanOrigin, step, chunk)
		asks = append(asks, e)
		return err
	}
	switch j.Status {
	case render.Queued:
		if err := ask(task.RenderStart, 0); err != nil {
			return 0, err
		}
	case render.Rendering:
		chunks, err := render.Chunks(ctx, tx, j.TenantID, j.Key)
		if err != nil {
			return 0, err
		}
		quiet := j.UpdatedAt.Before(stuck)
		done := 0
		for _, c := range chunks {
			switch {
			case c.Status == render.ChunkDone:
				done++
			case c.Status == render.ChunkRendering && c.LeaseUntil != nil && c.LeaseUntil.Before(now),
				c.Status == render.ChunkPending && quiet:
				if err := ask(task.RenderChunk, c.Window.Index); err != nil {
					return 0, err
				}
			}
		}
		if done == len(chunks) && quiet { // stored, not joined (an empty plan: the join finds the stored output)
			if err := ask(task.RenderJoin, 0); err != nil {
				return 0, err
			}
		}
	}
	if len(asks) == 0 {
		return aggregate.Stale, nil
	}
	if j.RescueAsks > 0 && now.Before(j.RescuedAt.Add(rescueSpacing(s.p.Journey.StuckAfter, j.RescueAsks))) {
		rep.Waiting++
		return aggregate.Stale, nil
	}
	// The last re-ask, unless the render progressed since (which starts
	// the count again), counts once the stage handled it.
	handled := false
	if j.RescueAsks > 0 {
		if handled, err = rescueHandled(ctx, tx, j); err != nil {
			return 0, err
		}
	}
	if rescues := j.Rescues + btoi(handled); handled && rescues >= s.cfg.MaxRescues {
		progressed, err := lastProgress(ctx, tx, j)
		if err != nil {
			return 0, err
		}
		if idle := now.Sub(progressed); idle >= s.p.Journey.GiveUpAfter {
			rep.GaveUpOn++
			s.p.Logger.WarnContext(ctx, "render stuck", slog.String("render_id", j.ID.String()), slog.Int("rescues", rescues),
				slog.Duration("idle", idle.Round(time.Second)))
			msg := fmt.Sprintf("the render has not progressed for %s: its steps were re-asked %d times, and each reached the render stage and changed nothing; the render stage's logs and the quarantine (adapter quarantine list --consumer %s) say why",
				idle.Round(time.Minute), rescues, catalog.GroupRender.Name)
			if _, err := render.Apply(ctx, tx, scanOrigin, j, render.Change{To: render.Failed, ErrorCode: "render.stuck", ErrorMessage: msg}); err != nil {
				return 0, err
			}
			return aggregate.Applied, record(ctx, tx, repair{Kind: RepairRenderGiveUp, AggregateType: task.RenderAggregateType, AggregateID: j.ID.String(), Reason: "render.stuck: " + msg})
		}
	}
	ids := make([]uuid.UUID, len(asks))
	for i, e := range asks {
		ids[i] = uuid.MustParse(e.Envelope.EventID)
	}
	if _, err := render.Apply(ctx, tx, scanOrigin, j, render.Change{Asked: ids, Rescued: handled}, asks...); err != nil {
		if errors.Is(err, render.ErrStale) {
			return aggregate.Stale, nil
		}
		return 0, err
	}
	if err := record(ctx, tx, repair{Kind: RepairRenderRescue, AggregateType: task.RenderAggregateType, AggregateID: j.ID.String(),
		Reason: fmt.Sprintf("the render stopped moving in %s: %d step(s) re-asked", j.Status, len(asks)), Rescue: true}); err != nil {
		return 0, err
	}
	rep.Rescued++
	s.p.Logger.InfoContext(ctx, "render step re-asked", slog.String("render_id", j.ID.String()), slog.String("status", string(j.Status)),
		slog.Int("events", len(asks)))
	return aggregate.Applied, nil
}

// rescueSpacing is how long after its asks-th re-ask (since the last
// progress) the next may go: the stuck deadline, doubling, capped at
// maxRescueSpacing of it.
func rescueSpacing(stuckAfter time.Duration, asks int) time.Duration {
	return stuckAfter * time.Duration(1<<min(max(asks-1, 0), maxRescueDoublings))
}

// maxRescueDoublings caps rescueSpacing at 8 stuck deadlines.
const maxRescueDoublings = 3

// rescueHandled reports whether j's last re-ask reached the render stage:
// its inbox holds every event of it, or a chunk of the render was claimed
// (or given back) after it.
func rescueHandled(ctx context.Context, tx pgx.Tx, j render.Job) (bool, error) {
	var handled bool
	err := tx.QueryRow(ctx, `SELECT (SELECT count(*) FROM inbox_dedup WHERE consumer_name = $1 AND event_id = ANY($2)) = cardinality($2)
			OR EXISTS (SELECT 1 FROM render_chunks WHERE tenant_id = $3 AND render_key = $4 AND updated_at > $5)`,
		catalog.GroupRender.Name, j.RescueEvents, j.TenantID, j.Key, j.RescuedAt).Scan(&handled)
	if err != nil {
		return false, fmt.Errorf("did the render stage take the re-ask of render %s: %w", j.ID, err)
	}
	return handled, nil
}

// lastProgress is when j last moved forward: it started, a chunk of its
// content was stored, or its join was asked for.
func lastProgress(ctx context.Context, tx pgx.Tx, j render.Job) (time.Time, error) {
	var at time.Time
	err := tx.QueryRow(ctx, `SELECT greatest(coalesce(j.started_at, j.created_at), j.join_requested_at,
			(SELECT max(c.updated_at) FROM render_chunks c WHERE c.tenant_id = j.tenant_id AND c.render_key = j.render_key AND c.status = 'DONE'))
		FROM render_jobs j WHERE j.render_job_id = $1`, j.ID).Scan(&at)
	if err != nil {
		return time.Time{}, fmt.Errorf("last progress of render %s: %w", j.ID, err)
	}
	return at, nil
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
