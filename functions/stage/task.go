package stage

import (
	"context"
	"errors"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/aivedio/pipeline/shared/envelope"
	"github.com/aivedio/pipeline/shared/inbox"
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

// DoLocked runs fn on task id, locked, in the inbox-protected transaction
// of ev for consumer (see inbox.Do), if the task is still in status. A
// stage reads the task before its slow work (a download, ffprobe, ffmpeg)
// and another delivery may have moved it since: then ev is a stale no-op
// and fn does not run. fn's error rolls its work back and is returned
// unchanged.
func DoLocked(ctx context.Context, db inbox.TxBeginner, consumer string, ev envelope.Envelope, id uuid.UUID, status task.Status,
	fn func(ctx context.Context, tx pgx.Tx, cur task.Task) error,
) error {
	_, err := inbox.Do(ctx, db, consumer, ev, func(ctx context.Context, tx pgx.Tx) (inbox.Result, error) {
		cur, err := task.Lock(ctx, tx, id)
		if err != nil {
			return "", err
		}
		if cur.Status != status {
			return inbox.StaleNoop, nil
		}
		return inbox.Applied, fn(ctx, tx, cur)
	})
	return err
}
