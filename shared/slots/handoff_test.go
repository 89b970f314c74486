package slots

import (
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

// A handoff gives the released slot to the waiter it names: a newcomer
// that acquires right after finds the scope full.
func TestHandoffGivesTheFreedSlotToTheWaiter(t *testing.T) {
	t.Parallel()
	for _, backend := range backends {
		t.Run(backend.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, backend)
			ctx := t.Context()
			model := Scope{Name: "model:" + uuid.NewString(), Limit: 1}
			tenantA := Scope{Name: "tenant:" + uuid.NewString(), Limit: 5}
			tenantB := Scope{Name: "tenant:" + uuid.NewString(), Limit: 5}

			held, err := b.limiter.Acquire(ctx, acquireParams("task:a", time.Minute, tenantA, model))
			require.NoError(t, err)
			got, err := b.limiter.Handoff(ctx, held, acquireParams("task:b", time.Minute, tenantB, model))
			require.NoError(t, err)
			require.Equal(t, Lease{Holder: "task:b", Scopes: []string{tenantB.Name, model.Name}, TTL: time.Minute}, got)

			_, err = b.limiter.Acquire(ctx, acquireParams("task:c", time.Minute, model))
			var full *FullError
			require.ErrorAs(t, err, &full)
			require.Equal(t, model.Name, full.Scope)
			require.ErrorIs(t, err, ErrNoSlot)
			requireInUse(t, b.limiter, model.Name, 1)
			requireInUse(t, b.limiter, tenantA.Name, 0) // released where b does not take it
			requireInUse(t, b.limiter, tenantB.Name, 1)
		})
	}
}

// A waiter refused by a scope of its own still frees the released slot:
// the handoff never keeps a slot from the next in line.
func TestHandoffReleasesEvenWhenTheWaiterIsRefused(t *testing.T) {
	t.Parallel()
	for _, backend := range backends {
		t.Run(backend.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, backend)
			ctx := t.Context()
			model := Scope{Name: "model:" + uuid.NewString(), Limit: 1}
			tenantB := Scope{Name: "tenant:" + uuid.NewString(), Limit: 1}

			held, err := b.limiter.Acquire(ctx, acquireParams("task:a", time.Minute, model))
			require.NoError(t, err)
			_, err = b.limiter.Acquire(ctx, acquireParams("task:b-other", time.Minute, tenantB))
			require.NoError(t, err)

			_, err = b.limiter.Handoff(ctx, held, acquireParams("task:b", time.Minute, tenantB, model))
			var full *FullError
			require.ErrorAs(t, err, &full)
			require.Equal(t, tenantB.Name, full.Scope)
			requireInUse(t, b.limiter, model.Name, 0)
		})
	}
}
