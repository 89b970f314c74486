package stage

import (
	"context"
	"errors"

	"github.com/google/uuid"

	"github.com/aivedio/pipeline/shared/envelope"
	"github.com/aivedio/pipeline/shared/outcome"
	"github.com/aivedio/pipeline/shared/task"
)

// ReadTask reads the task ev is about, before a stage's work. A task that
// does not exist is permanent (the event is wrong, not early), and so is a
// task of another tenant than ev's (see [CheckTenant]). Whether the task
// is in a state the stage acts on is for the caller to judge, with the
// task package's predicate for its event type ([task.FetchActs] and the
// like): one it is not is a stale event, answered with [Noop].
func ReadTask(ctx context.Context, q task.Querier, ev envelope.Envelope, id uuid.UUID) (task.Task, error) {
	t, err := task.Get(ctx, q, id)
	if errors.Is(err, task.ErrNotFound) {
		return task.Task{}, outcome.Permanentf("task.not_found", "task %s does not exist", id)
	}
	if err != nil {
		return task.Task{}, err
	}
	if err := CheckTenant(ev, t.TenantID); err != nil {
		return task.Task{}, err
	}
	return t, nil
}
