package api

import (
	"context"
	"log/slog"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/aivedio/pipeline/shared/tenant"
)

// CodeOverloaded: new generations from this tenant are refused for a while
// because the broker is not taking the pipeline's messages.
const CodeOverloaded = "overloaded"

// shedCheck is how often the shedder measures the outbox backlog.
const shedCheck = 2 * time.Second

// shedder protects the pipeline while the broker is down. The API keeps
// accepting generations (they wait in the outbox, which is the point of
// it) until the oldest due, unpublished outbox row is older than after;
// from then on creates from tenants whose priority is below belowPriority
// get 503 with Retry-After, until the backlog drains. Reads, cancels and
// downloads never shed: they do not add to the backlog.
type shedder struct {
	pool          *pgxpool.Pool
	after         time.Duration
	belowPriority int
	log           *slog.Logger
	backlog       atomic.Int64 // age of the oldest due unpublished row, ns
}

func (s *shedder) run(ctx context.Context) {
	if s.after <= 0 {
		return
	}
	t := time.NewTicker(shedCheck)
	defer t.Stop()
	shedding := false
	for {
		var age float64
		qctx, cancel := context.WithTimeout(ctx, shedCheck)
		err := s.pool.QueryRow(qctx, `SELECT coalesce(extract(epoch FROM now() - min(created_at)), 0)
			FROM outbox_events WHERE published_at IS NULL AND available_at <= now()`).Scan(&age)
		cancel()
		if err == nil {
			s.backlog.Store(int64(age * float64(time.Second)))
			if now := s.overloaded(); now != shedding {
				shedding = now
				s.log.WarnContext(ctx, "outbox backlog changed create shedding", slog.Bool("shedding", now),
					slog.Duration("oldest_unpublished", time.Duration(s.backlog.Load())), slog.Int("below_priority", s.belowPriority))
			}
		} else if ctx.Err() == nil {
			s.log.WarnContext(ctx, "outbox backlog check failed", slog.String("error", err.Error()))
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (s *shedder) overloaded() bool {
	return s.after > 0 && time.Duration(s.backlog.Load()) > s.after
}

// refuse answers a create from p with 503 while the backlog is too old and
// p's priority is low.
func (s *shedder) refuse(p tenant.Principal) *apiError {
	if !s.overloaded() || p.Priority >= s.belowPriority {
		return nil
	}
	e := errorf(http.StatusServiceUnavailable, CodeOverloaded,
		"the pipeline is behind (its message broker is not keeping up) and is taking new generations from higher-priority tenants only; retry after %d seconds",
		int(shedRetryAfter.Seconds()))
	e.Header = http.Header{"Retry-After": {strconv.Itoa(int(shedRetryAfter.Seconds()))}}
	return e
}

// refuseRender answers a new render from p with 503 while the backlog is
// half as old as the generation threshold and p's priority is low: a
// render is the costliest work a tenant can start, so it is paused first
// (seed 7.14.2).
func (s *shedder) refuseRender(p tenant.Principal) *apiError {
	if !s.pressed(p) {
		return nil
	}
	e := errorf(http.StatusServiceUnavailable, CodeOverloaded,
		"the pipeline is behind (its message broker is not keeping up) and is pausing new renders from lower-priority tenants; retry after %d seconds",
		int(shedRetryAfter.Seconds()))
	e.Header = http.Header{"Retry-After": {strconv.Itoa(int(shedRetryAfter.Seconds()))}}
	return e
}

// pressed reports whether the backlog is half as old as the shed
// threshold and p's priority is low: the point from which p's renders
// pause and its intake slows down, before its creates are refused.
func (s *shedder) pressed(p tenant.Principal) bool {
	return s.after > 0 && time.Duration(s.backlog.Load()) > s.after/2 && p.Priority < s.belowPriority
}

// shedRetryAfter is the Retry-After of a shed create.
const shedRetryAfter = 30 * time.Second
