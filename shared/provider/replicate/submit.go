package replicate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strings"

	"github.com/aivedio/pipeline/shared/provider"
)

// createBody is the body of both create-prediction endpoints.
type createBody struct {
	Version             string         `json:"version,omitempty"`
	Input               map[string]any `json:"input"`
	Webhook             string         `json:"webhook,omitempty"`
	WebhookEventsFilter []string       `json:"webhook_events_filter,omitempty"`
}

var (
	modelName = regexp.MustCompile(`^([A-Za-z0-9][A-Za-z0-9._-]*)/([A-Za-z0-9][A-Za-z0-9._-]*)$`)
	versionID = regexp.MustCompile(`^[0-9a-f]{64}$`)
)

// Submit creates a prediction. Model is "owner/name" (the model's latest
// version, the official-models endpoint), "owner/name:<version id>" or a
// bare 64-hex version id.
//
// Replicate does not promise to honour the Idempotency-Key header it is
// sent; see the package documentation for how a lost answer is reconciled.
func (c *Client) Submit(ctx context.Context, req provider.SubmitRequest) (provider.Job, error) {
	const op = "create prediction"
	if req.IdempotencyKey == "" {
		return provider.Job{}, &provider.Error{Class: provider.ClassRejected, Message: op + ": idempotency key is required"}
	}
	path, version, err := createPath(req.Model)
	if err != nil {
		return provider.Job{}, &provider.Error{Class: provider.ClassRejected, Message: op, Err: err}
	}
	body := createBody{Version: version, Input: c.input(req)}
	if req.CallbackURL != "" {
		hook, err := markWebhook(req.CallbackURL, req.ClientRequestID)
		if err != nil {
			return provider.Job{}, &provider.Error{Class: provider.ClassRejected, Message: op, Err: err}
		}
		// Intermediate events would only cost callbacks; the pipeline
		// acts on terminal states.
		body.Webhook, body.WebhookEventsFilter = hook, []string{"completed"}
	}
	b, err := json.Marshal(body)
	if err != nil {
		return provider.Job{}, &provider.Error{Class: provider.ClassRejected, Message: op + ": encode input", Err: err}
	}

	rep, err := c.roundTrip(ctx, apiCall{
		op:     op,
		method: http.MethodPost,
		url:    c.endpoint(path, nil),
		body:   b,
		header: http.Header{"Idempotency-Key": {req.IdempotencyKey}},
		submit: true,
		scrub:  provider.Scrubber(req.Prompt),
	})
	if err != nil {
		return provider.Job{}, err
	}
	job, err := c.parseJob(op, rep.status, rep.body)
	if err != nil {
		return provider.Job{}, err
	}
	if job.ClientRequestID == "" {
		job.ClientRequestID = req.ClientRequestID
	}
	return job, nil
}

// createPath picks the endpoint for a model reference.
func createPath(model string) (path, version string, err error) {
	name, ver, pinned := strings.Cut(model, ":")
	switch {
	case !pinned && versionID.MatchString(model):
		return "/v1/predictions", model, nil
	case pinned && modelName.MatchString(name) && versionID.MatchString(ver):
		return "/v1/predictions", ver, nil
	case !pinned && modelName.MatchString(model):
		m := modelName.FindStringSubmatch(model)
		return "/v1/models/" + url.PathEscape(m[1]) + "/" + url.PathEscape(m[2]) + "/predictions", "", nil
	}
	return "", "", fmt.Errorf("model %q is not owner/name, owner/name:version or a version id", provider.Shorten(model, 100))
}

// markWebhook adds the client request id to the callback URL, where
// Replicate keeps it for FindByClientRequestID and the callback.
func markWebhook(callback, clientRequestID string) (string, error) {
	u, err := url.Parse(callback)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return "", errors.New("callback URL must be an absolute http(s) URL")
	}
	if clientRequestID == "" {
		return u.String(), nil
	}
	q := u.Query()
	q.Set(ClientRequestIDParam, clientRequestID)
	u.RawQuery = q.Encode()
	return u.String(), nil
}

// parseJob reads a prediction answer.
func (c *Client) parseJob(op string, status int, body []byte) (provider.Job, error) {
	p, err := decodePrediction(body)
	if err != nil {
		return provider.Job{}, c.malformed(op, status, err)
	}
	j, err := p.job(c.retention)
	if err != nil {
		return provider.Job{}, c.malformed(op, status, err)
	}
	return j, nil
}
