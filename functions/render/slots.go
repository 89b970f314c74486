package render

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/aivedio/pipeline/functions/stage"
	"github.com/aivedio/pipeline/shared/aggregate"
	"github.com/aivedio/pipeline/shared/outbox"
	renders "github.com/aivedio/pipeline/shared/render"
	"github.com/aivedio/pipeline/shared/slots"
	"github.com/aivedio/pipeline/shared/task"
)

// DefaultTenantChunks is how many chunks of one tenant render at once
// across the fleet (RENDER_TENANT_CHUNKS).
const DefaultTenantChunks = 4

// A chunk whose tenant renders TenantChunks chunks already waits on the
// render.export DELAY topic: slotWaitBase the first time, doubling up to
// slotWaitMax, each ±20 %. It is acknowledged, so waiting spends none of
// the group's delivery attempts.
const (
	slotWaitBase = 2 * time.Second
	slotWaitMax  = 30 * time.Second
)

// tenantSlot is a chunk's place among its tenant's rendering chunks, a
// lease in Redis (package slots). Its holder is the chunk (tenant, content
// key, index), not the delivery: a duplicate delivery of a chunk another
// one renders renews the same slot instead of taking a second.
type tenantSlot struct {
	limiter *slots.Limiter
	params  slots.AcquireParams
	lease   slots.Lease
	held    bool
}

// slotFor is chunk index of j's place in its tenant's slots; nil when the
// stage runs without a limiter.
func (s *renderer) slotFor(j renders.Job, index int) *tenantSlot {
	if s.Slots == nil {
		return nil
	}
	return &tenantSlot{limiter: s.Slots, params: slots.AcquireParams{
		Scopes: []slots.Scope{{Name: "render-tenant:" + j.TenantID.String(), Limit: s.TenantChunks}},
		Holder: fmt.Sprintf("chunk:%s:%s:%d", j.TenantID, j.Key, index),
		TTL:    s.Lease,
	}}
}

// take takes the slot; false: the tenant's slots are all taken. Redis
// being unreachable does not hold a render back: the chunk renders
// without a slot (the limit is loosened, never a render failed for it),
// logged and counted.
func (t *tenantSlot) take(ctx context.Context, log *slog.Logger) bool {
	if t == nil {
		return true
	}
	lease, err := t.limiter.Acquire(ctx, t.params)
	switch {
	case errors.Is(err, slots.ErrNoSlot):
		return false
	case err != nil:
		chunkLabel("slot_unavailable").Inc()
		log.WarnContext(ctx, "tenant render slots unreachable; the chunk renders without one", slog.String("error", err.Error()))
		return true
	}
	t.lease, t.held = lease, true
	return true
}

// renew keeps the slot while the chunk renders. A slot that ran out is
// taken again if there is room; if not, the chunk goes on (it holds its
// claim) and the tenant is one over its limit until it ends.
func (t *tenantSlot) renew(ctx context.Context) {
	if t == nil {
		return
	}
	if lease, err := t.limiter.Acquire(ctx, t.params); err == nil {
		t.lease, t.held = lease, true
	}
}

// release frees the slot. Only the delivery that claimed the chunk
// releases it: a duplicate that found the chunk held shares the holder's
// slot.
func (t *tenantSlot) release(ctx context.Context) {
	if t == nil || !t.held {
		return
	}
	_ = t.limiter.Release(context.WithoutCancel(ctx), t.lease)
}

// waitForSlot puts chunk index of j off until a slot may be free: the
// same chunk asked again on the DELAY topic, this delivery recorded. The
// render counts as progressing meanwhile (its tenant's other chunks
// render), so the reconciler does not re-ask it.
func (s *renderer) waitForSlot(ctx context.Context, d stage.Delivery[task.RenderRequested], j renders.Job, index int) error {
	waits := d.Payload.SlotWaits + 1
	wait := slotWait(waits)
	err := stage.ApplyTo(ctx, d, renders.Kind, j.ID, renders.Guard(renders.Rendering), func(ctx context.Context, tx pgx.Tx, cur renders.Job) (aggregate.Result, error) {
		ev, err := cur.AskLater(d.Origin, index, waits, time.Now().Add(wait))
		if err != nil {
			return 0, err
		}
		if err := renders.Touch(ctx, tx, cur.TenantID, cur.Key, uuid.Nil); err != nil {
			return 0, err
		}
		return aggregate.Applied, outbox.Write(ctx, tx, ev)
	})
	if err != nil {
		return err
	}
	chunkLabel("slot_wait").Inc()
	d.Log.InfoContext(ctx, "the tenant renders its RENDER_TENANT_CHUNKS chunks already; this chunk waits for a slot",
		slog.Int("chunk", index), slog.Int("limit", s.TenantChunks), slog.Int("waits", waits), slog.Duration("wait", wait))
	return nil
}

// slotWait is the wait before a chunk's waits-th look for a slot.
func slotWait(waits int) time.Duration {
	d := min(slotWaitBase<<min(max(waits-1, 0), 8), slotWaitMax)
	return time.Duration(float64(d) * (0.8 + 0.4*rand.Float64()))
}
