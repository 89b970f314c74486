package stage

import (
	"context"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/aivedio/pipeline/shared/asset"
	"github.com/aivedio/pipeline/shared/catalog"
	"github.com/aivedio/pipeline/shared/outbox"
	"github.com/aivedio/pipeline/shared/review"
	"github.com/aivedio/pipeline/shared/task"
)

// FinishMedia finishes cur, a MEDIA_PROCESSING task locked in tx, once its
// media is complete: every derivative of source stored or, for an optional
// one, given up on for now (listed in missing_derivatives), and its content
// review, when one is required, approved. It does nothing while a step is
// still running. The transcode stage calls it for each derivative and the
// review stage for an approval, each under the task's row lock, so exactly
// one of them, whatever the order, sees the task complete.
func FinishMedia(ctx context.Context, tx pgx.Tx, o task.Origin, cur task.Task, source Asset) error {
	have, err := asset.DerivativeKinds(ctx, tx, source.ID)
	if err != nil {
		return err
	}
	for _, step := range DerivativeSteps(source.HasAudio) {
		kind := catalog.DerivativeKind(step)
		if !slices.Contains(have, asset.Kind(kind)) && !slices.Contains(cur.MissingDerivatives, kind) {
			return nil // another step is still running
		}
	}
	blocked, err := review.Blocks(ctx, tx, cur.ID)
	if err != nil || blocked {
		return err // the content review has not approved the output yet
	}
	// A task the client canceled after its provider job had finished
	// keeps its output and is charged for it: the product rule for a
	// cancel that came too late (docs/api.md, "Cancel").
	final, reason := task.Succeeded, "every derivative stored"
	if cur.CancelRequested {
		final, reason = task.CanceledWithOut, "every derivative stored; the cancel came after the provider finished"
	}
	if len(cur.MissingDerivatives) > 0 {
		reason += "; without " + strings.ToLower(strings.Join(cur.MissingDerivatives, ", ")) + " (retried in the background)"
	}
	settle, err := o.Emit(cur, task.SettleRequested{TaskID: cur.ID, Status: final})
	if err != nil {
		return err
	}
	_, err = task.Apply(ctx, tx, o, cur, task.Transition{To: final, Reason: reason,
		Set: task.Fields{Progress: task.Ptr(100)}, Events: []outbox.Event{settle}})
	return err
}
