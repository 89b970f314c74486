package reconcile

import (
	"context"

	"github.com/aivedio/pipeline/shared/retention"
)

// maintainRetention keeps the outbox and the inbox bounded on the scan's
// tick: partitions made ahead, partitions past REPLAY_WINDOW dropped
// (package retention says when it may). A step whose lock was busy is in
// the report and waits for the next tick; only a failure of the database
// fails the scan.
func (r *reconciler) maintainRetention(ctx context.Context) (retention.Report, error) {
	return retention.Maintain(ctx, r.Pool, retention.Params{Window: r.ReplayWindow, Logger: r.Logger})
}
