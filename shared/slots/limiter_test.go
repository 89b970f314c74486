package slots

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/shared/config"
)

type testBundle struct {
	client  *redis.Client
	limiter *Limiter
	prefix  string
}

// setup connects to the backend's Redis and gives the test its own key
// prefix, so parallel tests never see each other's scopes; the keys are
// deleted and the client closed in t.Cleanup.
func setup(t *testing.T, backend backend) *testBundle {
	t.Helper()
	cfg := config.Redis{URL: backend.url(t)}
	require.NoError(t, cfg.Validate())
	opts, err := redis.ParseURL(cfg.URL)
	require.NoError(t, err)
	client := redis.NewClient(opts)
	t.Cleanup(func() { require.NoError(t, client.Close()) })

	prefix := "aivedio:slots:test:" + uuid.NewString() + ":"
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		iter := client.Scan(ctx, 0, prefix+"*", 100).Iterator()
		for iter.Next(ctx) {
			require.NoError(t, client.Del(ctx, iter.Val()).Err())
		}
		require.NoError(t, iter.Err())
	})
	return &testBundle{client: client, limiter: New(client, &Opts{KeyPrefix: prefix}), prefix: prefix}
}

func acquireParams(holder string, ttl time.Duration, scopes ...Scope) AcquireParams {
	return AcquireParams{Scopes: scopes, Holder: holder, TTL: ttl}
}

func requireInUse(t *testing.T, l *Limiter, scope string, want int) {
	t.Helper()
	n, err := l.InUse(t.Context(), scope)
	require.NoError(t, err)
	require.Equal(t, want, n, "holders of %s", scope)
}

func TestAcquireRespectsLimit(t *testing.T) {
	t.Parallel()
	for _, backend := range backends {
		t.Run(backend.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, backend)
			ctx := t.Context()
			tenant := Scope{Name: "tenant:" + uuid.NewString(), Limit: 2}

			first, err := b.limiter.Acquire(ctx, acquireParams("attempt:1", time.Minute, tenant))
			require.NoError(t, err)
			require.Equal(t, Lease{Holder: "attempt:1", Scopes: []string{tenant.Name}, TTL: time.Minute}, first)
			_, err = b.limiter.Acquire(ctx, acquireParams("attempt:2", time.Minute, tenant))
			require.NoError(t, err)

			_, err = b.limiter.Acquire(ctx, acquireParams("attempt:3", time.Minute, tenant))
			require.ErrorIs(t, err, ErrNoSlot)
			require.ErrorContains(t, err, fmt.Sprintf("scope %q is at its limit of 2", tenant.Name))
			requireInUse(t, b.limiter, tenant.Name, 2)

			require.NoError(t, b.limiter.Release(ctx, first))
			requireInUse(t, b.limiter, tenant.Name, 1)
			_, err = b.limiter.Acquire(ctx, acquireParams("attempt:3", time.Minute, tenant))
			require.NoError(t, err)
			requireInUse(t, b.limiter, tenant.Name, 2)
		})
	}
}

func TestAcquireIsAtomicAcrossScopes(t *testing.T) {
	t.Parallel()
	for _, backend := range backends {
		t.Run(backend.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, backend)
			ctx := t.Context()
			tenant := Scope{Name: "tenant:t1", Limit: 5}
			model := Scope{Name: "model:veo", Limit: 1}

			_, err := b.limiter.Acquire(ctx, acquireParams("attempt:1", time.Minute, tenant, model))
			require.NoError(t, err)

			_, err = b.limiter.Acquire(ctx, acquireParams("attempt:2", time.Minute, tenant, model))
			require.ErrorIs(t, err, ErrNoSlot)
			require.ErrorContains(t, err, `"model:veo"`)
			requireInUse(t, b.limiter, tenant.Name, 1)
			requireInUse(t, b.limiter, model.Name, 1)
			score := b.client.ZScore(ctx, b.prefix+tenant.Name, "attempt:2")
			require.ErrorIs(t, score.Err(), redis.Nil, "the refused holder must not be left in the tenant scope")
		})
	}
}

func TestAcquireIsIdempotentPerHolder(t *testing.T) {
	t.Parallel()
	for _, backend := range backends {
		t.Run(backend.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, backend)
			ctx := t.Context()
			tenant := Scope{Name: "tenant:t1", Limit: 2}

			lease, err := b.limiter.Acquire(ctx, acquireParams("attempt:1", time.Minute, tenant))
			require.NoError(t, err)
			again, err := b.limiter.Acquire(ctx, acquireParams("attempt:1", time.Minute, tenant))
			require.NoError(t, err)
			require.Equal(t, lease, again)
			requireInUse(t, b.limiter, tenant.Name, 1)

			// A full scope still admits a holder that is already in it: a
			// redelivered message renews its own slot.
			_, err = b.limiter.Acquire(ctx, acquireParams("attempt:2", time.Minute, tenant))
			require.NoError(t, err)
			_, err = b.limiter.Acquire(ctx, acquireParams("attempt:1", time.Minute, tenant))
			require.NoError(t, err)
			requireInUse(t, b.limiter, tenant.Name, 2)

			// One release frees the holder's only slot, and releasing twice is fine.
			require.NoError(t, b.limiter.Release(ctx, lease))
			require.NoError(t, b.limiter.Release(ctx, lease))
			requireInUse(t, b.limiter, tenant.Name, 1)
		})
	}
}

func TestLeaseExpires(t *testing.T) {
	t.Parallel()
	for _, backend := range backends {
		t.Run(backend.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, backend)
			ctx := t.Context()
			tenant := Scope{Name: "tenant:t1", Limit: 1}

			crashed, err := b.limiter.Acquire(ctx, acquireParams("attempt:crashed", 300*time.Millisecond, tenant))
			require.NoError(t, err)
			_, err = b.limiter.Acquire(ctx, acquireParams("attempt:next", time.Minute, tenant))
			require.ErrorIs(t, err, ErrNoSlot)

			// Nobody releases the crashed holder's slot: it frees itself.
			require.Eventually(t, func() bool {
				_, err := b.limiter.Acquire(ctx, acquireParams("attempt:next", time.Minute, tenant))
				if err != nil {
					require.ErrorIs(t, err, ErrNoSlot)
					return false
				}
				return true
			}, 10*time.Second, 20*time.Millisecond)

			err = b.limiter.Renew(ctx, crashed)
			require.ErrorIs(t, err, ErrLeaseLost)
			require.ErrorContains(t, err, `"tenant:t1"`)
			requireInUse(t, b.limiter, tenant.Name, 1)
			_, err = b.limiter.Acquire(ctx, acquireParams("attempt:crashed", time.Minute, tenant))
			require.ErrorIs(t, err, ErrNoSlot, "the lost holder must not get back in while the scope is full")
		})
	}
}

func TestExpiredLeaseIsLostEvenWhenNotTaken(t *testing.T) {
	t.Parallel()
	for _, backend := range backends {
		t.Run(backend.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, backend)
			ctx := t.Context()
			tenant := Scope{Name: "tenant:t1", Limit: 1}

			lease, err := b.limiter.Acquire(ctx, acquireParams("attempt:1", 300*time.Millisecond, tenant))
			require.NoError(t, err)
			require.Eventually(t, func() bool {
				n, err := b.limiter.InUse(ctx, tenant.Name)
				require.NoError(t, err)
				return n == 0
			}, 10*time.Second, 20*time.Millisecond)

			require.ErrorIs(t, b.limiter.Renew(ctx, lease), ErrLeaseLost)
			_, err = b.limiter.Acquire(ctx, acquireParams("attempt:1", time.Minute, tenant))
			require.NoError(t, err, "acquiring again is the way back in when there is room")
		})
	}
}

func TestRenewExtendsEveryScope(t *testing.T) {
	t.Parallel()
	for _, backend := range backends {
		t.Run(backend.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, backend)
			ctx := t.Context()
			tenant := Scope{Name: "tenant:t1", Limit: 1}
			model := Scope{Name: "model:veo", Limit: 1}

			lease, err := b.limiter.Acquire(ctx, acquireParams("attempt:1", 300*time.Millisecond, tenant, model))
			require.NoError(t, err)
			lease.TTL = time.Hour
			require.NoError(t, b.limiter.Renew(ctx, lease))

			for _, s := range lease.Scopes {
				// Both the lease and the key holding it now live about an hour.
				ttl, err := b.client.PTTL(ctx, b.prefix+s).Result()
				require.NoError(t, err)
				require.Greater(t, ttl, 59*time.Minute, s)
				require.LessOrEqual(t, ttl, time.Hour, s)
			}
			requireInUse(t, b.limiter, tenant.Name, 1)
			requireInUse(t, b.limiter, model.Name, 1)
		})
	}
}

func TestLostLeaseHoldsNothing(t *testing.T) {
	t.Parallel()
	for _, backend := range backends {
		t.Run(backend.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, backend)
			ctx := t.Context()
			tenant := Scope{Name: "tenant:t1", Limit: 3}
			model := Scope{Name: "model:veo", Limit: 3}

			lease, err := b.limiter.Acquire(ctx, acquireParams("attempt:1", time.Minute, tenant, model))
			require.NoError(t, err)
			// The reconciler no longer counts the attempt against the model.
			require.NoError(t, b.limiter.Rebuild(ctx, model.Name, nil, time.Minute))

			err = b.limiter.Renew(ctx, lease)
			require.ErrorIs(t, err, ErrLeaseLost)
			require.ErrorContains(t, err, `"model:veo"`)
			requireInUse(t, b.limiter, tenant.Name, 0)
		})
	}
}

func TestAcquireRaceAdmitsExactlyLimit(t *testing.T) {
	t.Parallel()
	for _, backend := range backends {
		t.Run(backend.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, backend)
			ctx := t.Context()
			tenant := Scope{Name: "tenant:t1", Limit: 3}
			model := Scope{Name: "model:veo", Limit: 10}
			const racers = 20

			var (
				wg       sync.WaitGroup
				admitted atomic.Int32
				start    = make(chan struct{})
				errs     = make(chan error, racers)
			)
			for i := range racers {
				wg.Go(func() {
					<-start
					_, err := b.limiter.Acquire(ctx, acquireParams(fmt.Sprintf("attempt:%d", i), time.Minute, tenant, model))
					switch {
					case err == nil:
						admitted.Add(1)
					case !errors.Is(err, ErrNoSlot):
						errs <- err
					}
				})
			}
			close(start)
			wg.Wait()
			close(errs)

			for err := range errs {
				require.NoError(t, err)
			}
			require.EqualValues(t, 3, admitted.Load())
			requireInUse(t, b.limiter, tenant.Name, 3)
			requireInUse(t, b.limiter, model.Name, 3)
		})
	}
}

func TestRebuildReplacesHolders(t *testing.T) {
	t.Parallel()
	for _, backend := range backends {
		t.Run(backend.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, backend)
			ctx := t.Context()
			tenant := Scope{Name: "tenant:t1", Limit: 2}

			stale, err := b.limiter.Acquire(ctx, acquireParams("attempt:stale", time.Minute, tenant))
			require.NoError(t, err)

			inFlight := []string{"attempt:a", "attempt:b", "attempt:c"}
			require.NoError(t, b.limiter.Rebuild(ctx, tenant.Name, inFlight, time.Minute))
			members, err := b.client.ZRange(ctx, b.prefix+tenant.Name, 0, -1).Result()
			require.NoError(t, err)
			require.ElementsMatch(t, inFlight, members)
			requireInUse(t, b.limiter, tenant.Name, 3)

			// Rebuild mirrors PostgreSQL even above the limit; newcomers wait, the
			// rebuilt holders keep their slots and can renew them.
			_, err = b.limiter.Acquire(ctx, acquireParams("attempt:new", time.Minute, tenant))
			require.ErrorIs(t, err, ErrNoSlot)
			require.ErrorIs(t, b.limiter.Renew(ctx, stale), ErrLeaseLost)
			require.NoError(t, b.limiter.Renew(ctx, Lease{Holder: "attempt:a", Scopes: []string{tenant.Name}, TTL: time.Minute}))
			_, err = b.limiter.Acquire(ctx, acquireParams("attempt:b", time.Minute, tenant))
			require.NoError(t, err)
			requireInUse(t, b.limiter, tenant.Name, 3)

			require.NoError(t, b.limiter.Rebuild(ctx, tenant.Name, nil, time.Minute))
			requireInUse(t, b.limiter, tenant.Name, 0)
			exists, err := b.client.Exists(ctx, b.prefix+tenant.Name).Result()
			require.NoError(t, err)
			require.Zero(t, exists)
		})
	}
}

func TestKeysDoNotOutliveTheirLeases(t *testing.T) {
	t.Parallel()
	for _, backend := range backends {
		t.Run(backend.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, backend)
			ctx := t.Context()
			tenant := Scope{Name: "tenant:t1", Limit: 2}
			key := b.prefix + tenant.Name

			short, err := b.limiter.Acquire(ctx, acquireParams("attempt:short", time.Minute, tenant))
			require.NoError(t, err)
			_, err = b.limiter.Acquire(ctx, acquireParams("attempt:long", time.Hour, tenant))
			require.NoError(t, err)
			ttl, err := b.client.PTTL(ctx, key).Result()
			require.NoError(t, err)
			require.Greater(t, ttl, 59*time.Minute, "the key lives as long as its longest lease")

			require.NoError(t, b.limiter.Release(ctx, short))
			_, err = b.limiter.Acquire(ctx, acquireParams("attempt:short", 300*time.Millisecond, tenant))
			require.NoError(t, err)
			ttl, err = b.client.PTTL(ctx, key).Result()
			require.NoError(t, err)
			require.Greater(t, ttl, 59*time.Minute, "a shorter lease must not shorten the key")

			require.NoError(t, b.limiter.Rebuild(ctx, tenant.Name, []string{"attempt:only"}, 300*time.Millisecond))
			require.Eventually(t, func() bool {
				n, err := b.client.Exists(ctx, key).Result()
				require.NoError(t, err)
				return n == 0
			}, 10*time.Second, 20*time.Millisecond, "an abandoned scope's key disappears on its own")
		})
	}
}
