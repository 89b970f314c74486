package reconcile

import (
	"context"
	"log/slog"
	"time"

	"github.com/aivedio/pipeline/shared/retention"
	"github.com/aivedio/pipeline/shared/task"
)

// ScanEventType is the CloudEvent type of the periodic trigger (a Knative
// PingSource, a ticker in `go run ./local`). It carries no envelope: it
// names no tenant or task, it only says "look now".
const ScanEventType = "aivedio.reconcile.scan"

// scanOrigin marks what the services write.
var scanOrigin = task.Origin{Producer: Name}

// ScanReport counts what one scan did.
type ScanReport struct {
	Rescued            map[task.Status]int // tasks whose lost event was re-emitted, by state
	Settled            int                 // terminal tasks whose settlement was asked again
	DerivativesRetried int                 // optional derivatives a finished task lacks, asked for again
	SlotScopesRebuilt  int                 // concurrency-slot scopes reset from the tasks in flight
	WaitersWoken       int                 // waiting tasks handed a slot whose wake-up was lost
	NeedsAttention     int
	Uploads            UploadReport
	Renders            RenderReport
	StaleOutboxRows    int              // unpublished rows older than OUTBOX_STALE_AFTER
	OldestUnpublished  time.Duration    // age of the oldest unpublished row
	ReplaysApplied     int              // executed replays whose after-snapshot was recorded
	FailuresPruned     int64            // delivery failure records of messages long gone
	Retention          retention.Report // outbox and inbox partitions created and dropped
}

// services are the scan's jobs, one service each.
type services struct {
	tasks       *TaskRescuer
	resettle    *Resettler
	derivatives *DerivativeRetrier
	slots       *SlotRebuilder
	waitlist    *WaitlistWaker
	uploads     *UploadSettler
	renders     *RenderSettler
	replays     *ReplayOutcomes
	failures    *FailurePruner
	outbox      *OutboxMonitor
	retention   *RetentionKeeper
}

func newServices(p Params) *services {
	return &services{
		tasks:       NewTaskRescuer(p),
		resettle:    NewResettler(p),
		derivatives: NewDerivativeRetrier(p),
		slots:       NewSlotRebuilder(p),
		waitlist:    NewWaitlistWaker(p),
		uploads:     NewUploadSettler(p),
		renders:     NewRenderSettler(p),
		replays:     NewReplayOutcomes(p),
		failures:    NewFailurePruner(p),
		outbox:      NewOutboxMonitor(p),
		retention:   NewRetentionKeeper(p),
	}
}

// Scan runs every service once, in order, at one clock reading: lost task
// steps re-emitted ([TaskRescuer]), lost settles asked again, optional
// derivatives retried, slot scopes rebuilt, lost wake-ups of the slot
// wait list repaired, uploads and renders settled,
// replay outcomes recorded, old failure records pruned, the outbox looked
// at, partitions kept. The first failure ends the scan; the next one
// starts again from the top, and every repair is idempotent.
func (r *reconciler) Scan(ctx context.Context) (ScanReport, error) {
	s := r.services
	now := r.now()
	var rep ScanReport
	tasks, err := s.tasks.pass(ctx, now)
	rep.Rescued, rep.NeedsAttention = tasks.Rescued, tasks.NeedsAttention
	if err != nil {
		return rep, err
	}
	if rep.Settled, err = s.resettle.pass(ctx, now); err != nil {
		return rep, err
	}
	if rep.DerivativesRetried, err = s.derivatives.pass(ctx, now); err != nil {
		return rep, err
	}
	if rep.SlotScopesRebuilt, err = s.slots.RunOnce(ctx); err != nil {
		return rep, err
	}
	if rep.WaitersWoken, err = s.waitlist.RunOnce(ctx); err != nil {
		return rep, err
	}
	if rep.Uploads, err = s.uploads.pass(ctx, now); err != nil {
		return rep, err
	}
	if rep.Renders, err = s.renders.pass(ctx, now); err != nil {
		return rep, err
	}
	// A replay's after-snapshot is for people; failing to take it must
	// not stop the pruning and the outbox check below.
	if rep.ReplaysApplied, err = s.replays.RunOnce(ctx); err != nil {
		r.Logger.WarnContext(ctx, "could not record the outcome of replays; the next scan tries again", slog.String("error", err.Error()))
	}
	if rep.FailuresPruned, err = s.failures.RunOnce(ctx); err != nil {
		return rep, err
	}
	outbox, err := s.outbox.pass(ctx, now)
	rep.StaleOutboxRows, rep.OldestUnpublished = outbox.StaleRows, outbox.OldestUnpublished
	if err != nil {
		return rep, err
	}
	if rep.Retention, err = s.retention.RunOnce(ctx); err != nil {
		return rep, err
	}
	return rep, nil
}

// Scanner runs the periodic scan outside a CloudEvents delivery (the
// stage's trigger, `go run ./local`'s ticker, tests).
type Scanner struct{ r *reconciler }

// NewScanner returns a scanner over p's database and journey settings.
func NewScanner(p Params) *Scanner { return &Scanner{r: newReconciler(p)} }

// Scan is [reconciler.Scan].
func (s *Scanner) Scan(ctx context.Context) (ScanReport, error) { return s.r.Scan(ctx) }
