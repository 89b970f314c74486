package reconcile

import (
	"cmp"
	"context"
	"log/slog"
	"time"

	"github.com/aivedio/pipeline/functions/reconcile/internal/testsignal"
)

// DefaultInterval is how often a service's Run makes a pass. The
// deployment does not use Run: its periodic trigger runs every service
// once per [Scanner.Scan].
const DefaultInterval = time.Minute

// DefaultBatch bounds what one pass of a service repairs: a backlog is
// worked off over several passes instead of in one long request.
const DefaultBatch = 100

// DefaultMaxRescues bounds how often a service re-emits the step of an
// aggregate (a task, an upload, a render) that does not move, counting
// only re-emissions its stage took, before handing it to a person or
// failing it: a step that keeps failing must not be re-emitted for ever.
const DefaultMaxRescues = 3

// MaintenanceConfig configures the scan's services, one block each; a zero
// field takes its Default* constant.
type MaintenanceConfig struct {
	Tasks       TaskRescuerConfig
	Resettle    ResettlerConfig
	Derivatives DerivativeRetrierConfig
	Slots       SlotRebuilderConfig
	Waitlist    WaitlistWakerConfig
	Uploads     UploadSettlerConfig
	Renders     RenderSettlerConfig
	Failures    FailurePrunerConfig
}

// TestSignals are what a service tells a test that armed them (Init).
type TestSignals struct {
	// Pass is signalled after each pass of Run with the pass's error.
	Pass testsignal.Signal[error]
}

// Init arms every signal.
func (ts *TestSignals) Init() { ts.Pass.Init() }

// loop is the Run every service shares.
type loop struct {
	name     string
	interval time.Duration
	logger   *slog.Logger
	// TestSignals lets a test wait for a pass instead of sleeping.
	TestSignals TestSignals
}

func newLoop(name string, interval time.Duration, logger *slog.Logger) loop {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return loop{name: name, interval: cmp.Or(interval, DefaultInterval), logger: logger}
}

// run makes a pass at once and then every interval until ctx ends; a
// failed pass is logged and the next one tries again.
func (l *loop) run(ctx context.Context, pass func(ctx context.Context) error) error {
	t := time.NewTicker(l.interval)
	defer t.Stop()
	for {
		err := pass(ctx)
		if err != nil && ctx.Err() == nil {
			l.logger.WarnContext(ctx, "reconcile pass failed; the next one tries again", slog.String("service", l.name), slog.String("error", err.Error()))
		}
		l.TestSignals.Pass.Signal(err)
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-t.C:
		}
	}
}

// clock is p's clock: Now, or time.Now.
func clock(p Params) time.Time {
	if p.Now != nil {
		return p.Now()
	}
	return time.Now()
}

// defaults fills p's logger.
func defaults(p Params) Params {
	if p.Logger == nil {
		p.Logger = slog.New(slog.DiscardHandler)
	}
	return p
}
