// Package delivery hands one CloudEvent to a stage function and reads its
// answer as an outcome: in process ([Func]) or over HTTP ([HTTP]), the
// two ways the source adapter, the stage-contract suite and the tests
// that drive a function reach it.
//
// # Guarantee
//
// Both ways read the same answer the same way (docs/design.md §6): success is
// a nil error; a 4xx, or an outcome.Permanent error, is permanent, with
// the stage's own code and message; anything else is retryable. What the
// caller does with that (ACK, quarantine, retry) is the caller's: this
// package neither retries a function's failure nor settles a message. The
// one retry it does is HTTP's cold start: a function scaling from zero is
// called again, within a bound, before the delivery counts as failed.
package delivery

import (
	"context"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/aivedio/pipeline/shared/outcome"
)

// Deliverer hands one CloudEvent to a stage function. Its error is
// classified with package outcome: permanent means quarantine, anything
// else retry. It may be called again for the same event (at-least-once
// delivery): the function's inbox makes the effect happen once.
type Deliverer interface {
	Deliver(ctx context.Context, ev event.Event) error
}

// Func is a stage function's Handle, called in process.
type Func func(ctx context.Context, ev event.Event) (*event.Event, error)

// Deliver calls the function and classifies its result exactly as the
// HTTP path classifies the same answer (outcome.FromResult): a 4xx is
// permanent, with the stage's own code and message.
func (f Func) Deliver(ctx context.Context, ev event.Event) error {
	_, err := f(ctx, ev)
	return outcome.FromResult(err)
}
