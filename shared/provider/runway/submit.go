package runway

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"

	"github.com/aivedio/pipeline/shared/provider"
)

// Submit creates a text-to-video task. The request is checked as
// [Client.Supports] does first, so nothing Runway would refuse is sent.
//
// Runway honours no idempotency key, so none is sent and a lost answer is
// [provider.ClassTimeoutUnknown]; see the package documentation for why
// the pipeline cannot look the task up afterwards. CallbackURL is ignored:
// Runway sends no callbacks and the pipeline polls.
func (c *Client) Submit(ctx context.Context, req provider.SubmitRequest) (provider.Job, error) {
	const op = "create task"
	body, err := bodyFor(req)
	if err != nil {
		return provider.Job{}, err
	}
	b, err := json.Marshal(body)
	if err != nil {
		return provider.Job{}, &provider.Error{Class: provider.ClassRejected, Message: op + ": encode body", Err: err}
	}
	sent := c.now()
	rep, err := c.roundTrip(ctx, apiCall{
		op: op, method: http.MethodPost, path: "/v1/text_to_video", body: b,
		create: true, scrub: provider.Scrubber(req.Prompt),
	})
	if err != nil {
		return provider.Job{}, err
	}
	var created struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(rep.body, &created); err != nil || created.ID == "" || checkID(op, created.ID) != nil {
		// A 2xx means Runway took the request: a task probably exists.
		return provider.Job{}, c.malformed(op, rep.status, errors.New("create answer has no usable task id"))
	}
	// The answer is the id alone; a new task waits to be enqueued.
	return provider.Job{ID: created.ID, ClientRequestID: req.ClientRequestID, Status: provider.StatusQueued, CreatedAt: sent}, nil
}
