package submit

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/aivedio/pipeline/functions/stage"
	"github.com/aivedio/pipeline/shared/aggregate"
	"github.com/aivedio/pipeline/shared/attempt"
	"github.com/aivedio/pipeline/shared/provider"
	"github.com/aivedio/pipeline/shared/slots"
	"github.com/aivedio/pipeline/shared/task"
	"github.com/aivedio/pipeline/shared/waitlist"
)

// This file holds which provider a submit goes to: the candidates the
// model has, their circuits and slots, and a kept attempt's provider first.

// pick is where a submit goes: a route whose slots are held, or none with
// the floor of the wait, or unfit saying why no provider can serve it.
type pick struct {
	route *provider.Route
	floor time.Duration
	unfit string
	// wait is the first full slot scope that refused a provider: what the
	// task waits for on the wait list, when it waits.
	wait *waitlist.Wait
}

// route chooses the provider of the submit and takes its slots. kept is
// the task's open attempt, if any: it stays with its provider unless that
// provider is unavailable and the attempt is known to have made no remote
// job. why says why the submit waits, or why kept was left.
func (s *submitter) route(ctx context.Context, t task.Task, kept *attempt.Attempt) (pick, string, error) {
	var reasons []string
	var wait, pausedWait *waitlist.Wait
	var floor time.Duration
	try := func(r provider.Route, c provider.Client) (bool, error) {
		held, err := s.pausedScope(ctx, t, r.Provider)
		if err != nil {
			return false, err
		}
		if held != "" {
			reasons = append(reasons, r.Provider+": "+held+" is paused")
			if pausedWait == nil {
				pausedWait = &waitlist.Wait{Scope: waitlist.PausedScope(held), Provider: r.Provider}
			}
			return false, nil
		}
		// A half-open circuit's one trial call is claimed here, so that
		// the submits routed meanwhile go elsewhere instead of being
		// refused there.
		unclaim, ok := provider.ClaimTrial(c)
		if !ok {
			reasons = append(reasons, r.Provider+": circuit open")
			floor = max(floor, provider.BreakerPause(c))
			return false, nil
		}
		if s.Slots == nil {
			return true, nil
		}
		_, err = s.Slots.Acquire(ctx, stage.GenerationSlots(t, r.Provider, s.Journey))
		if errors.Is(err, slots.ErrNoSlot) {
			unclaim()
			if w, ok := waitlist.WaitOf(err, r.Provider); ok && wait == nil {
				wait = &w
			}
			reasons = append(reasons, r.Provider+": "+err.Error())
			return false, nil
		}
		if err != nil {
			unclaim()
			return false, fmt.Errorf("acquire slots: %w", err)
		}
		return true, nil
	}
	reason := func() string {
		prefix := "no provider available: "
		switch {
		case wait != nil:
			// Waiting for a free slot is the pipeline pacing itself, not
			// a refusal (see waitTx); so is waiting out a pause.
			prefix = noSlotReason
		case pausedWait != nil:
			prefix = pausedReason
		}
		return prefix + strings.Join(reasons, "; ")
	}
	keptTried := false
	if kept != nil {
		c, err := s.Providers.Client(kept.Provider)
		switch {
		case err != nil && !kept.NoRemoteJob():
			// Its job may exist at a provider this process cannot call:
			// no other may take the task over, and waiting will not help.
			return pick{}, "", stage.Uncurable("provider.not_configured", err)
		case err != nil:
			reasons = append(reasons, err.Error())
		case !kept.NoRemoteJob() || provider.BreakerState(c) == "closed":
			// An attempt that may have a job stays with its provider; one
			// that has none stays while its provider is healthy, and is
			// otherwise one candidate among the route's (a half-open
			// circuit's trial should not hold it while another provider
			// is closed).
			keptTried = true
			ok, err := try(provider.Route{Provider: kept.Provider, Model: kept.Model}, c)
			if err != nil || ok {
				return pick{route: &provider.Route{Provider: kept.Provider, Model: kept.Model}}, "", err
			}
		}
		if !kept.NoRemoteJob() {
			// It may have a job at its provider: only that provider may
			// go on with it, with the same key.
			return pick{floor: floor, wait: cmp.Or(wait, pausedWait)}, reason(), nil
		}
	}
	cands, unfit := s.Providers.Candidates(t.Model, s.request(t, attempt.Attempt{}))
	if kept != nil && !keptTried {
		// The attempt's provider refused it and is not healthy yet: its
		// trial call is for a task that has not been refused, and this one
		// goes to a closed provider first.
		cands = lastly(cands, kept.Provider)
	}
	for _, c := range cands {
		if keptTried && c.Provider == kept.Provider {
			continue
		}
		if kept != nil && c.Provider == kept.Provider {
			// Its own provider again: the attempt goes on, with its model.
			c.Model = kept.Model
		}
		ok, err := try(c.Route, c.Client)
		if err != nil {
			return pick{}, "", err
		}
		if ok {
			return pick{route: &c.Route}, reason(), nil
		}
	}
	if len(cands) == 0 && kept == nil {
		if len(unfit) == 0 {
			unfit = []string{"PROVIDER_ROUTES names no provider for model " + t.Model}
		}
		return pick{unfit: strings.Join(unfit, "; ")}, "", nil
	}
	return pick{floor: floor, wait: cmp.Or(wait, pausedWait)}, reason(), nil
}

// pausedScope is the scope of t's work at provider that an operator
// paused (its tenant, its model or the provider), "" when none is or
// there is no wait list to hold paused work on.
func (s *submitter) pausedScope(ctx context.Context, t task.Task, provider string) (string, error) {
	if s.Waitlist == nil {
		return "", nil
	}
	for _, scope := range []string{"tenant:" + t.TenantID.String(), "model:" + t.Model, "provider:" + provider} {
		paused, err := s.Waitlist.Paused(ctx, scope)
		if err != nil || paused {
			return scope, err
		}
	}
	return "", nil
}

// lastly moves provider's candidates behind the others, in order.
func lastly(cands []provider.Candidate, name string) []provider.Candidate {
	out := make([]provider.Candidate, 0, len(cands))
	var later []provider.Candidate
	for _, c := range cands {
		if c.Provider == name {
			later = append(later, c)
			continue
		}
		out = append(out, c)
	}
	return append(out, later...)
}

// unroutable fails a task no configured provider can serve: retrying
// cannot help until the request or the configuration changes.
func (s *submitter) unroutable(ctx context.Context, d stage.Delivery[task.SubmitRequested], why string) error {
	return s.beforeSubmitting(ctx, d, func(ctx context.Context, tx pgx.Tx, cur task.Task) (aggregate.Result, error) {
		return aggregate.Applied, task.Fail(ctx, tx, d.Origin, cur, "provider.unsupported_request", "no configured provider can serve this request: "+why)
	})
}
