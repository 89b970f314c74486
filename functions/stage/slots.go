package stage

import (
	"context"
	"log/slog"
	"time"

	"github.com/aivedio/pipeline/shared/config"
	"github.com/aivedio/pipeline/shared/provider"
	"github.com/aivedio/pipeline/shared/slots"
	"github.com/aivedio/pipeline/shared/task"
	"github.com/aivedio/pipeline/shared/waitlist"
)

// GenerationSlots are the concurrency slots one running provider job holds:
// one per tenant, model and provider, leased to the task so that any stage
// can release them and a crash frees them when the lease ends.
func GenerationSlots(t task.Task, providerName string, j config.Journey) slots.AcquireParams {
	return slots.AcquireParams{
		Scopes: []slots.Scope{
			{Name: "tenant:" + t.TenantID.String(), Limit: j.SlotsPerTenant},
			{Name: "model:" + t.Model, Limit: j.SlotsPerModel},
			{Name: "provider:" + providerName, Limit: j.SlotsPerProv},
		},
		Holder: t.ID.String(),
		TTL:    j.SlotLease,
	}
}

// ReleaseSlots frees a task's slots after its provider job ended and,
// with a wait list (wl not nil), hands them to the best waiter of their
// scopes. It runs after the commit and outlives the caller's
// cancellation; a failure only delays the slot until its lease ends (or
// the reconciler's wake-up of idle scopes), so it is logged, not returned.
func ReleaseSlots(ctx context.Context, l *slots.Limiter, wl *waitlist.List, p slots.AcquireParams, log *slog.Logger) {
	if l == nil {
		return
	}
	names := make([]string, len(p.Scopes))
	for i, s := range p.Scopes {
		names[i] = s.Name
	}
	lease := slots.Lease{Holder: p.Holder, Scopes: names, TTL: p.TTL}
	if wl == nil {
		ReleaseLease(ctx, l, lease, log)
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if _, err := wl.Release(ctx, lease); err != nil {
		log.WarnContext(ctx, "release slots to the wait list failed; the reconciler wakes the waiters",
			slog.String("task_id", p.Holder), slog.String("error", err.Error()))
	}
}

// ReleaseLease frees lease, outliving the caller's cancellation; a
// failure is logged: the lease frees itself when it ends.
func ReleaseLease(ctx context.Context, l *slots.Limiter, lease slots.Lease, log *slog.Logger) {
	if l == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := l.Release(ctx, lease); err != nil {
		log.WarnContext(ctx, "release slots failed; they free themselves when the lease ends",
			slog.String("task_id", lease.Holder), slog.String("error", err.Error()))
	}
}

// Backoff is the wait before retry number n (0-based): exponential from
// base, capped at most, jittered over its upper half by rand (in [0,1)), and
// never shorter than floor (a provider's Retry-After).
func Backoff(n int, base, most, floor time.Duration, rand float64) time.Duration {
	d := base
	for i := 0; i < n && d < most; i++ {
		d *= 2
	}
	d = min(d, most)
	d = d/2 + time.Duration(rand*float64(d/2))
	return max(d, floor)
}

// ProviderOf is the client of the named provider, where a task's job runs.
// A provider this process does not configure is [Uncurable]: the job may
// exist there, and no other provider may take it over, so a person decides.
func ProviderOf(set *provider.Set, name string) (provider.Client, error) {
	c, err := set.Client(name)
	if err != nil {
		return nil, Uncurable("provider.not_configured", err)
	}
	return c, nil
}
