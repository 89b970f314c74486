// Package fetch is the fetch stage: it streams a finished provider job's
// output into object storage and records it as the task's SOURCE asset.
//
// The object key is deterministic (tenant, task, "output"), so a repeated
// fetch overwrites instead of duplicating; an object already stored by a
// delivery that died before its database write is adopted as it is, not
// downloaded again. The bytes never sit in memory whole: the provider's
// response body is piped into a multipart upload that computes the
// sha256 on the way.
//
// An output that is not ready yet, or a provider that answers 429 or 503,
// is a business wait, not a failure (seed 7.10.3): the delivery is
// answered, the wait is recorded on the task's timeline, and a delayed
// fetch is scheduled on asset.fetch.delay, short first and longer later
// (FETCH_RETRY_BASE doubling up to FETCH_RETRY_MAX, or the provider's
// Retry-After), until FETCH_MAX_WAIT after the first try, when the task
// FAILS with provider.output_not_ready. The delayed fetch carries the
// task's state and version (task.Wait): one that no longer holds is a
// stale no-op. An output URL that expired is asked for again once; when
// the provider cannot give a fresh one the task FAILS with that reason. A
// new generation is never started to replace a lost output: that would
// charge the provider twice for one request. An output the download guard
// refuses (provider.OutputGuard: not https, a host that is not public, over
// FETCH_MAX_BYTES) FAILS the task with the refusal's code, released.
package fetch

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/aivedio/pipeline/functions/stage"
	"github.com/aivedio/pipeline/shared/asset"
	"github.com/aivedio/pipeline/shared/blob"
	"github.com/aivedio/pipeline/shared/catalog"
	"github.com/aivedio/pipeline/shared/config"
	"github.com/aivedio/pipeline/shared/outbox"
	"github.com/aivedio/pipeline/shared/outcome"
	"github.com/aivedio/pipeline/shared/provider"
	"github.com/aivedio/pipeline/shared/task"
)

// Name is the stage's name.
const Name = "fetch"

// Params are what the stage needs.
type Params struct {
	Pool      *pgxpool.Pool
	Providers *provider.Set
	Blob      *blob.Store
	Timeout   time.Duration // bound of one provider API call (not of the download)
	Journey   config.Journey
	Logger    *slog.Logger
}

type fetcher struct{ Params }

// New returns the fetch function.
func New(p Params) *stage.Function {
	f := &fetcher{Params: p}
	return stage.NewTyped(stage.Typed[task.FetchRequested]{Group: catalog.GroupFetch, DB: p.Pool, Logger: p.Logger, Work: f.work,
		Acts: func(t task.Task, _ task.FetchRequested) bool { return task.FetchActs(t) }})
}

func (f *fetcher) work(ctx context.Context, d stage.Delivery[task.FetchRequested]) error {
	t, o := d.Task, d.Origin
	key, err := blob.Key(t.TenantID.String(), t.ID.String(), "output", "video.mp4")
	if err != nil {
		return outcome.Permanent("asset.bad_key", err)
	}
	obj, err := f.Blob.Stat(ctx, key)
	if err != nil || obj.SHA256 == "" {
		if err != nil && !errors.Is(err, blob.ErrNotFound) {
			return fmt.Errorf("look for an earlier upload: %w", err)
		}
		obj, err = f.download(ctx, t, key)
		if errors.Is(err, errExpired) {
			return d.Locked(ctx, task.Fetching, func(ctx context.Context, tx pgx.Tx, cur task.Task) error {
				return task.Fail(ctx, tx, o, cur, "provider.output_expired",
					"the provider's output expired before it could be stored; the generation was not repeated")
			})
		}
		if refused := (*provider.RefusedError)(nil); errors.As(err, &refused) {
			return d.Locked(ctx, task.Fetching, func(ctx context.Context, tx pgx.Tx, cur task.Task) error {
				return task.Fail(ctx, tx, o, cur, refused.Code,
					"the provider's output was refused and not stored ("+refused.Message+"); the generation was not repeated")
			})
		}
		if waits(err) {
			return f.wait(ctx, d, err)
		}
		if stage.IsUncurable(err) {
			return d.Escalate(ctx, err)
		}
		if err != nil {
			return err
		}
	}
	sum, err := hex.DecodeString(obj.SHA256)
	if err != nil || len(sum) != 32 {
		return fmt.Errorf("stored object %s has no usable sha256 (%q)", key, obj.SHA256)
	}
	return d.Locked(ctx, task.Fetching, func(ctx context.Context, tx pgx.Tx, cur task.Task) error {
		assetID, err := asset.RecordOutput(ctx, tx, asset.NewOutput{TenantID: cur.TenantID, TaskID: cur.ID, ObjectKey: key,
			SHA256: sum, SizeBytes: obj.Size, ContentType: contentType(obj)})
		if err != nil {
			return err
		}
		probe, err := o.Emit(cur, task.Postprocess{TaskID: cur.ID, AssetID: assetID, Step: catalog.TagProbe})
		if err != nil {
			return err
		}
		_, err = task.Apply(ctx, tx, o, cur, task.Transition{To: task.MediaProcessing, Reason: "output stored", Events: []outbox.Event{probe}})
		return err
	})
}

var errExpired = errors.New("output expired")

// waits reports whether a failed download is a business wait: the output
// is not there yet, or the provider asks us to come back later.
func waits(err error) bool {
	switch provider.ClassOf(err) {
	case provider.ClassOutputNotReady, provider.ClassRateLimited, provider.ClassUnavailable:
		return true
	}
	return false
}

// wait records a business wait in d's inbox-protected transaction: a
// timeline row on the task (its version moves, so an older delayed fetch
// goes stale) and the next fetch, delayed; or, past FETCH_MAX_WAIT since
// the first try, the task's failure.
func (f *fetcher) wait(ctx context.Context, d stage.Delivery[task.FetchRequested], cause error) error {
	req, o := d.Payload, d.Origin
	return d.Locked(ctx, task.Fetching, func(ctx context.Context, tx pgx.Tx, cur task.Task) error {
		now := time.Now()
		since := req.WaitingSince
		if since.IsZero() {
			since = now
		}
		class := provider.ClassOf(cause)
		if waited := now.Sub(since); waited >= f.Journey.FetchMaxWait {
			return task.Fail(ctx, tx, o, cur, "provider.output_not_ready", fmt.Sprintf(
				"the provider's output was still not available %s after the first try (FETCH_MAX_WAIT %s, %d tries; last answer: %s); the generation was not repeated",
				waited.Round(time.Second), f.Journey.FetchMaxWait, req.RetryAttempt+1, class))
		}
		attempt := req.RetryAttempt + 1
		at := now.Add(stage.Backoff(attempt-1, f.Journey.FetchRetryBase, f.Journey.FetchRetryMax, provider.RetryAfterOf(cause), rand.Float64())).
			UTC().Truncate(time.Microsecond)
		next := task.FetchRequested{TaskID: cur.ID, AttemptID: req.AttemptID, Wait: task.Wait{
			ExpectedStatus: task.Fetching, ExpectedVersion: cur.Version + 1, NotBefore: at,
			Reason: "provider." + string(class), RetryAttempt: attempt, WaitingSince: since.UTC().Truncate(time.Microsecond),
		}}
		e, err := o.EmitAt(cur, next, at)
		if err != nil {
			return err
		}
		_, err = task.Touch(ctx, tx, o, cur, fmt.Sprintf("output not available (provider %s): fetch again at %s (retry %d)",
			class, at.Format(time.RFC3339), attempt), e)
		return err
	})
}

// download streams the job's output into key. It asks the provider for the
// job first: output URLs are short-lived, the job's current one is freshest.
func (f *fetcher) download(ctx context.Context, t task.Task, key string) (blob.Object, error) {
	c, err := stage.ProviderOf(f.Providers, t.Provider)
	if err != nil {
		return blob.Object{}, err
	}
	for try := 0; ; try++ {
		getCtx, cancel := context.WithTimeout(ctx, f.Timeout)
		job, err := c.Get(getCtx, t.ProviderJobID)
		cancel()
		if err != nil {
			return blob.Object{}, classify(err)
		}
		out, err := c.Download(ctx, job)
		if provider.ClassOf(err) == provider.ClassOutputExpired {
			if try == 0 {
				continue
			}
			return blob.Object{}, errExpired
		}
		if refused := (*provider.RefusedError)(nil); errors.As(err, &refused) {
			return blob.Object{}, refused
		}
		if err != nil {
			return blob.Object{}, classify(err)
		}
		obj, err := f.Blob.Put(ctx, key, out.Body, &blob.PutOpts{ContentType: "video/mp4", Size: max(out.ContentLength, 0)})
		refusal := provider.RefusalOf(out)
		out.Body.Close()
		if refusal != nil {
			return blob.Object{}, refusal
		}
		if err != nil {
			return blob.Object{}, fmt.Errorf("store output: %w", err)
		}
		return obj, nil
	}
}

// classify marks a provider failure during the fetch as retryable: the
// adapter backs off, and a job that stays unreachable ends in the dead-letter
// topic, where an operator sees it, rather than failing a paid generation on
// one bad answer.
func classify(err error) error {
	return outcome.Retryable("provider."+string(provider.ClassOf(err)), err)
}

func contentType(o blob.Object) string {
	if o.ContentType == "" {
		return "video/mp4"
	}
	return o.ContentType
}
