package runway

import (
	"context"
	"net/http"
	"time"

	"github.com/aivedio/pipeline/shared/provider"
)

// Get returns a task's current state.
func (c *Client) Get(ctx context.Context, jobID string) (provider.Job, error) {
	const op = "get task"
	if err := checkID(op, jobID); err != nil {
		return provider.Job{}, err
	}
	rep, err := c.roundTrip(ctx, apiCall{op: op, method: http.MethodGet, path: "/v1/tasks/" + jobID})
	if err != nil {
		return provider.Job{}, err
	}
	return c.parseJob(op, rep)
}

// parseJob reads a task answer.
func (c *Client) parseJob(op string, rep reply) (provider.Job, error) {
	t, err := decodeTask(rep.body)
	if err != nil {
		return provider.Job{}, c.malformed(op, rep.status, err)
	}
	j, err := t.job(c.now(), c.retention)
	if err != nil {
		return provider.Job{}, c.malformed(op, rep.status, err)
	}
	return j, nil
}

// Cancel stops a task that has not finished and returns its state after.
//
// Runway's DELETE /v1/tasks/{id} cancels an unfinished task but deletes a
// finished one with its output, so Cancel reads the task first and
// returns a finished one untouched. A task that finishes between the read
// and the DELETE is deleted all the same; it was being given up on. A
// task that is gone after the DELETE is reported canceled.
func (c *Client) Cancel(ctx context.Context, jobID string) (provider.Job, error) {
	const op = "cancel task"
	j, err := c.Get(ctx, jobID)
	if err != nil || j.Status.Terminal() {
		return j, err
	}
	if _, err := c.roundTrip(ctx, apiCall{op: op, method: http.MethodDelete, path: "/v1/tasks/" + jobID}); err != nil {
		return provider.Job{}, err
	}
	after, err := c.Get(ctx, jobID)
	if provider.ClassOf(err) == provider.ClassNotFound {
		return provider.Job{ID: jobID, Status: provider.StatusCanceled, CreatedAt: j.CreatedAt}, nil
	}
	return after, err
}

// FindByClientRequestID cannot work against Runway: the API has no list
// endpoint and a task carries nothing of ours, so a task whose create
// answer was lost cannot be found. It answers [provider.ClassRejected] with
// Code [CodeLookupUnsupported], which the reconciler takes as ambiguous
// (NEEDS_ATTENTION), never as "not found, submit again".
func (c *Client) FindByClientRequestID(_ context.Context, _ string, _ time.Time) (provider.Job, error) {
	return provider.Job{}, &provider.Error{
		Class:   provider.ClassRejected,
		Code:    CodeLookupUnsupported,
		Message: "find task: Runway cannot look a task up by client request id; whether the lost create started one is unknown",
	}
}

// ParseCallback refuses everything: Runway sends no callbacks, and the
// pipeline polls its tasks.
func (c *Client) ParseCallback(http.Header, []byte, time.Time) (provider.Job, error) {
	return provider.Job{}, &provider.Error{Class: provider.ClassRejected, Message: "verify callback: runway sends no callbacks"}
}
