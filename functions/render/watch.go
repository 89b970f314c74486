package render

import (
	"context"
	"errors"
	"time"

	renders "github.com/aivedio/pipeline/shared/render"
)

// This file holds the watch beside a chunk's ffmpeg run: it renews the
// chunk's claim and slot, and stops the run when nobody wants the chunk
// any more or the claim was lost.

// errRenderEnded: the render left RENDERING while a step ran.
var errRenderEnded = errors.New("the render is no longer rendering")

// errLeaseLost: the chunk's claim ran out and another delivery took it.
var errLeaseLost = errors.New("the chunk's claim was lost to another delivery")

// watch runs while a chunk renders: it renews the lease and stops the
// work (cancel with a cause) when no render of the content is RENDERING
// any more or the claim was lost. It returns when ctx ends.
func (s *renderer) watch(ctx context.Context, cancel context.CancelCauseFunc, j renders.Job, l renders.Lease, slot *tenantSlot) {
	tick := time.NewTicker(s.Watch)
	defer tick.Stop()
	renewed := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		// The chunk is the content's: it is still wanted while any render
		// of the same content runs (a sibling, when this one was canceled).
		var wanted bool
		if err := s.Pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM render_jobs WHERE tenant_id = $1 AND render_key = $2 AND status = 'RENDERING')`,
			j.TenantID, j.Key).Scan(&wanted); err == nil && !wanted {
			cancel(errRenderEnded)
			return
		}
		if time.Since(renewed) >= s.Lease/4 {
			ok, err := l.Extend(ctx, s.Pool, s.Lease)
			if err == nil && !ok {
				cancel(errLeaseLost)
				return
			}
			if err == nil {
				renewed = time.Now()
			}
			slot.renew(ctx)
		}
	}
}
