// Package functions maps a stage name to the function that serves it. The
// root entry (function.go) and `go run ./local` use it to build the stage
// named by the STAGE variable; each stage lives in its own package below.
package functions

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/aivedio/pipeline/functions/fetch"
	"github.com/aivedio/pipeline/functions/notify"
	"github.com/aivedio/pipeline/functions/poll"
	"github.com/aivedio/pipeline/functions/probe"
	"github.com/aivedio/pipeline/functions/reconcile"
	"github.com/aivedio/pipeline/functions/render"
	"github.com/aivedio/pipeline/functions/review"
	"github.com/aivedio/pipeline/functions/settle"
	"github.com/aivedio/pipeline/functions/stage"
	"github.com/aivedio/pipeline/functions/submit"
	"github.com/aivedio/pipeline/functions/transcode"
	"github.com/aivedio/pipeline/shared/blob"
	"github.com/aivedio/pipeline/shared/catalog"
	"github.com/aivedio/pipeline/shared/config"
	"github.com/aivedio/pipeline/shared/media"
	"github.com/aivedio/pipeline/shared/provider"
	"github.com/aivedio/pipeline/shared/replay"
	"github.com/aivedio/pipeline/shared/slots"
	"github.com/aivedio/pipeline/shared/task"
	"github.com/aivedio/pipeline/shared/waitlist"
)

// Deps are the resources the stages share. A stage uses the ones it needs;
// [Open] makes all of them from a configuration.
type Deps struct {
	Logger *slog.Logger
	Pool   *pgxpool.Pool
	Redis  redis.UniversalClient
	Slots  *slots.Limiter
	Blob   *blob.Store
	Media  *media.Tool
	// Providers are the provider clients and the routes among them.
	Providers *provider.Set
	Journey   config.Journey
	// ReplayWindow is REPLAY_WINDOW, for the reconcile scan's partition
	// maintenance; config.DefaultReplayWindow when zero.
	ReplayWindow time.Duration
	// ProviderTimeout bounds one provider API call.
	ProviderTimeout time.Duration
	// CallbackURL is where the named provider sends completion callbacks;
	// nil or "" means poll only.
	CallbackURL func(provider string) string
	// TmpDir is where media stages write ffmpeg outputs; the system's when
	// empty.
	TmpDir string
	// RenderChunk and RenderLease are the render stage's chunk length and
	// claim; its defaults when zero.
	RenderChunk, RenderLease time.Duration
	// RenderChunkTimeoutFactor and RenderChunkTimeoutMin bound a chunk's
	// ffmpeg run; the render stage's defaults when zero.
	RenderChunkTimeoutFactor int
	RenderChunkTimeoutMin    time.Duration
	// RenderTenantChunks is how many chunks of one tenant render at once;
	// the render stage's default when zero.
	RenderTenantChunks int
	// Review is the content review's configuration: the probe asks for a
	// review when it is on, and the review stage calls its endpoint.
	Review config.Review
}

// Constructor builds one stage's function.
type Constructor func(ctx context.Context, deps Deps) (*stage.Function, error)

// constructors holds the stages whose handlers exist. A catalog stage
// missing here is refused at start-up with a clear error instead of being
// served by a placeholder.
var constructors = map[string]Constructor{
	submit.Name: func(_ context.Context, d Deps) (*stage.Function, error) {
		return submit.New(submit.Params{Pool: d.Pool, Providers: d.Providers, Slots: d.Slots, Waitlist: waitlistOf(d), Journey: d.Journey,
			Timeout: d.ProviderTimeout, CallbackURL: d.CallbackURL, Logger: d.Logger}), nil
	},
	poll.Name: func(_ context.Context, d Deps) (*stage.Function, error) {
		return poll.New(poll.Params{Pool: d.Pool, Providers: d.Providers, Redis: d.Redis, Slots: d.Slots, Waitlist: waitlistOf(d), Journey: d.Journey,
			Timeout: d.ProviderTimeout, Logger: d.Logger}), nil
	},
	fetch.Name: func(_ context.Context, d Deps) (*stage.Function, error) {
		return fetch.New(fetch.Params{Pool: d.Pool, Providers: d.Providers, Blob: d.Blob, Timeout: d.ProviderTimeout,
			Journey: d.Journey, Logger: d.Logger}), nil
	},
	probe.Name: func(_ context.Context, d Deps) (*stage.Function, error) {
		return probe.New(probe.Params{Pool: d.Pool, Blob: d.Blob, Media: d.Media, Review: d.Review.On(), Logger: d.Logger}), nil
	},
	transcode.Name: func(_ context.Context, d Deps) (*stage.Function, error) {
		return transcode.New(transcode.Params{Pool: d.Pool, Blob: d.Blob, Media: d.Media, TmpDir: d.TmpDir, Logger: d.Logger}), nil
	},
	review.Name: func(_ context.Context, d Deps) (*stage.Function, error) {
		return review.New(review.Params{Pool: d.Pool, Blob: d.Blob, Media: d.Media, Config: d.Review, TmpDir: d.TmpDir, Logger: d.Logger}), nil
	},
	render.Name: func(_ context.Context, d Deps) (*stage.Function, error) {
		return render.New(render.Params{Pool: d.Pool, Blob: d.Blob, Media: d.Media, Redis: d.Redis, TmpDir: d.TmpDir, Logger: d.Logger,
			ChunkLength: d.RenderChunk, Lease: d.RenderLease, ChunkTimeoutFactor: d.RenderChunkTimeoutFactor, ChunkTimeoutMin: d.RenderChunkTimeoutMin,
			Slots: d.Slots, TenantChunks: d.RenderTenantChunks}), nil
	},
	settle.Name: func(_ context.Context, d Deps) (*stage.Function, error) {
		return settle.New(settle.Params{Pool: d.Pool, Logger: d.Logger}), nil
	},
	notify.Name: func(_ context.Context, d Deps) (*stage.Function, error) {
		return notify.New(notify.Params{Redis: d.Redis, Logger: d.Logger}), nil
	},
	reconcile.Name: func(_ context.Context, d Deps) (*stage.Function, error) {
		return reconcile.New(reconcile.Params{Pool: d.Pool, Providers: d.Providers, Slots: d.Slots, Waitlist: waitlistOf(d), Journey: d.Journey,
			ReplayWindow: d.ReplayWindow, Timeout: d.ProviderTimeout, Replays: replay.NewDesk(d.Pool, ReplayRules(), &replay.DeskOpts{ReplayWindow: d.ReplayWindow}), Logger: d.Logger}), nil
	},
}

// waitlistOf is the wait list of the generation slots, nil when
// SCHED_WAITLIST is off or there are no slots.
func waitlistOf(d Deps) *waitlist.List {
	if !d.Journey.Waitlist || d.Slots == nil {
		return nil
	}
	j := d.Journey
	return waitlist.New(d.Pool, d.Slots, func(t task.Task, provider string) slots.AcquireParams {
		return stage.GenerationSlots(t, provider, j)
	}, "waitlist", &waitlist.Params{PriorityStep: j.PriorityStep, AgingMax: j.AgingMax})
}

// New builds the function of the named stage.
func New(ctx context.Context, name string, deps Deps) (*stage.Function, error) {
	if !slices.Contains(catalog.Stages(), name) {
		return nil, fmt.Errorf("unknown stage %q: set STAGE to one of %s", name, strings.Join(catalog.Stages(), ", "))
	}
	build, ok := constructors[name]
	if !ok {
		return nil, fmt.Errorf("stage %q has no handler in this build yet", name)
	}
	if deps.Logger == nil {
		deps.Logger = slog.New(slog.DiscardHandler)
	}
	return build(ctx, deps)
}

// Built lists the stages this build has handlers for, in catalog order.
func Built() []string {
	var out []string
	for _, s := range catalog.Stages() {
		if _, ok := constructors[s]; ok {
			out = append(out, s)
		}
	}
	return out
}
