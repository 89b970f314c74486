package replay_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/aivedio/pipeline/shared/preview"
	"github.com/aivedio/pipeline/shared/replay"
)

// An operator's replay: the dry run, the approval under a ticket, the
// execution. Each step is a row or a state change of message_replays.
func Example() {
	var (
		ctx     = context.Background()
		pool    *pgxpool.Pool // the service's pool
		rules   preview.Rules // the stages' previews: rules.All()
		eventID = uuid.MustParse("01936d3c-5b7e-7c3a-9f1e-2b4c6d8e0a1f")
		desk    = replay.NewDesk(pool, rules, nil)
	)
	plan, err := desk.Plan(ctx, replay.Ref{ID: eventID}, "alice")
	if err != nil {
		return
	}
	fmt.Println(plan.Verdict.Action, plan.Verdict.Reason) // ACT, STALE_NOOP or REFUSED, and why

	_, err = desk.Approve(ctx, plan.ReplayID, replay.Decision{Ticket: "OPS-42", Operator: "bob", Reason: "provider outage over"})
	if errors.Is(err, replay.ErrRefused) {
		return // recorded as REJECTED; nothing will be sent
	}
	x, err := desk.Execute(ctx, plan.ReplayID, "bob")
	if err != nil {
		return
	}
	fmt.Println(x.ReplayEventID) // in the outbox; the relay publishes it
}
