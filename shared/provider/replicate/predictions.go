package replicate

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/aivedio/pipeline/shared/provider"
)

// Get returns a prediction's current state.
func (c *Client) Get(ctx context.Context, jobID string) (provider.Job, error) {
	p, status, err := c.getPrediction(ctx, jobID)
	if err != nil {
		return provider.Job{}, err
	}
	j, err := p.job(c.retention)
	if err != nil {
		return provider.Job{}, c.malformed("get prediction", status, err)
	}
	return j, nil
}

// getPrediction reads one prediction as the API gives it.
func (c *Client) getPrediction(ctx context.Context, jobID string) (prediction, int, error) {
	const op = "get prediction"
	if err := checkID(op, jobID); err != nil {
		return prediction{}, 0, err
	}
	rep, err := c.roundTrip(ctx, apiCall{op: op, method: http.MethodGet, url: c.endpoint("/v1/predictions/"+jobID, nil)})
	if err != nil {
		return prediction{}, 0, err
	}
	p, err := decodePrediction(rep.body)
	if err != nil {
		return prediction{}, 0, c.malformed(op, rep.status, err)
	}
	return p, rep.status, nil
}

// Cancel asks Replicate to stop a prediction. Canceling a finished
// prediction changes nothing and returns it as it is.
func (c *Client) Cancel(ctx context.Context, jobID string) (provider.Job, error) {
	const op = "cancel prediction"
	if err := checkID(op, jobID); err != nil {
		return provider.Job{}, err
	}
	rep, err := c.roundTrip(ctx, apiCall{op: op, method: http.MethodPost, url: c.endpoint("/v1/predictions/"+jobID+"/cancel", nil)})
	if err != nil {
		return provider.Job{}, err
	}
	if len(bytes.TrimSpace(rep.body)) == 0 {
		// Some API descriptions give cancel no body; the state is a Get away.
		return c.Get(ctx, jobID)
	}
	return c.parseJob(op, rep.status, rep.body)
}

// FindByClientRequestID looks through the predictions created since since
// (less [Config.FindClockSkew]) for the one whose webhook URL carries
// clientRequestID. It reads at most [Config.MaxFindPages] pages, and looks
// up a listed prediction on its own only when the list leaves out its
// webhook.
//
// Not found is certain only if every API prediction in the window was
// created with a webhook; otherwise the answer is [provider.ClassRejected]
// with Code [CodeLookupAmbiguous], because a prediction submitted without a
// callback URL carries no marker and may be the one sought.
func (c *Client) FindByClientRequestID(ctx context.Context, clientRequestID string, since time.Time) (provider.Job, error) {
	const op = "find prediction"
	if clientRequestID == "" {
		return provider.Job{}, &provider.Error{Class: provider.ClassRejected, Message: op + ": client request id is required"}
	}
	query := url.Values{}
	var floor time.Time
	if !since.IsZero() {
		floor = since.Add(-c.skew)
		query.Set("created_after", floor.UTC().Format(time.RFC3339Nano))
	}
	next := c.endpoint("/v1/predictions", query)
	unmarked := 0
	for pages := 0; next != ""; pages++ {
		if pages == c.maxPages {
			return provider.Job{}, &provider.Error{
				Class:   provider.ClassRejected,
				Code:    CodeLookupAmbiguous,
				Message: fmt.Sprintf("%s: more than %d pages of predictions since the attempt", op, c.maxPages),
			}
		}
		rep, err := c.roundTrip(ctx, apiCall{op: op, method: http.MethodGet, url: next})
		if err != nil {
			return provider.Job{}, err
		}
		var pg page
		if err := json.Unmarshal(rep.body, &pg); err != nil {
			return provider.Job{}, c.malformed(op, rep.status, fmt.Errorf("decode page: %w", err))
		}
		if pg.Results == nil {
			return provider.Job{}, c.malformed(op, rep.status, errors.New("page has no results"))
		}
		reachedFloor := false
		for _, raw := range pg.Results {
			p, err := decodePrediction(raw)
			if err != nil {
				return provider.Job{}, c.malformed(op, rep.status, err)
			}
			created, err := time.Parse(time.RFC3339Nano, p.CreatedAt)
			if err != nil {
				return provider.Job{}, c.malformed(op, rep.status, errors.New("listed prediction has no valid created_at"))
			}
			if !floor.IsZero() && created.Before(floor) {
				// Newest first: a provider that ignores created_after has
				// now listed everything in the window.
				reachedFloor = true
				continue
			}
			v, job, err := c.judge(ctx, p, clientRequestID)
			switch {
			case err != nil:
				return provider.Job{}, err
			case v == isMatch:
				return job, nil
			case v == isUnmarked:
				unmarked++
			}
		}
		if reachedFloor || pg.Next == nil || *pg.Next == "" {
			break
		}
		if next, err = c.nextPage(*pg.Next); err != nil {
			return provider.Job{}, c.malformed(op, rep.status, err)
		}
	}
	if unmarked > 0 {
		return provider.Job{}, &provider.Error{
			Class:   provider.ClassRejected,
			Code:    CodeLookupAmbiguous,
			Message: fmt.Sprintf("%s: %d predictions without a webhook were created since the attempt; any may be the one sought", op, unmarked),
		}
	}
	return provider.Job{}, &provider.Error{Class: provider.ClassNotFound, Message: op + ": no prediction carries this client request id"}
}

// nextPage resolves a page's "next" link and refuses one on another
// origin, which would receive the API token.
func (c *Client) nextPage(next string) (string, error) {
	u, err := c.base.Parse(next)
	if err != nil {
		return "", errors.New("next page link is not a URL")
	}
	if !c.sameOrigin(u) {
		return "", errors.New("next page link leaves the API origin")
	}
	return u.String(), nil
}

// verdict is what one listed prediction means to a lookup.
type verdict int

const (
	notOurs    verdict = iota
	isUnmarked         // no webhook: may be a poll-only submit of ours
	isMatch
)

// judge decides whether listed prediction p is the one carrying
// clientRequestID; for a match it returns the prediction's current state.
func (c *Client) judge(ctx context.Context, p prediction, clientRequestID string) (verdict, provider.Job, error) {
	mark, known := p.marker()
	if !known {
		// List entries may leave the webhook out; the prediction itself
		// has it, and is current.
		full, status, err := c.getPrediction(ctx, p.ID)
		switch {
		case provider.ClassOf(err) == provider.ClassNotFound:
			return notOurs, provider.Job{}, nil // deleted since it was listed
		case err != nil:
			return notOurs, provider.Job{}, err
		}
		if full.Webhook == nil {
			// Not even the prediction says: count it as unmarked.
			full.Webhook = json.RawMessage("null")
		}
		if mark, _ = full.marker(); mark == clientRequestID {
			j, err := full.job(c.retention)
			if err != nil {
				return notOurs, provider.Job{}, c.malformed("get prediction", status, err)
			}
			return isMatch, j, nil
		}
		p = full
	}
	switch {
	case mark == clientRequestID:
		// The listed entry may lag; the prediction itself is current.
		j, err := c.Get(ctx, p.ID)
		return isMatch, j, err
	case p.hasWebhook(), p.Source == "web":
		// This client marks every webhook it sends, and the web
		// playground is not this client.
		return notOurs, provider.Job{}, nil
	}
	return isUnmarked, provider.Job{}, nil
}
