package providersim

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// delivery is one webhook to send, with its Standard Webhooks message id,
// which stays the same across retries.
type delivery struct {
	url   string
	msgID string
	body  []byte
	jobID string
}

// deliveryLocked snapshots j's state at now as its completion webhook.
func (s *Server) deliveryLocked(j *job, now time.Time) delivery {
	body, _ := json.Marshal(s.viewLocked(j, now))
	return delivery{url: j.webhook, msgID: "msg_" + s.newIDLocked(FormatReplicate), body: body, jobID: j.id}
}

// enqueue hands d to the workers, or drops and counts it when the queue is
// full: webhooks are a courtesy, the client also polls.
func (s *Server) enqueue(d delivery) {
	select {
	case s.hooks <- d:
	default:
		s.mu.Lock()
		s.stats.Webhooks.Dropped++
		s.mu.Unlock()
		s.log.Warn("provider simulator webhook queue full", slog.String("job_id", d.jobID))
	}
}

// deliverLoop is one webhook worker.
func (s *Server) deliverLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case d := <-s.hooks:
			s.deliver(ctx, d)
		}
	}
}

// deliver sends d, retrying a failed attempt (no answer, or not 2xx) up to
// WebhookAttempts times with doubling waits, as Replicate does for a
// prediction's final webhook.
func (s *Server) deliver(ctx context.Context, d delivery) {
	wait := s.opts.WebhookBackoff
	for attempt := 1; ; attempt++ {
		err := s.post(ctx, d)
		if err == nil {
			s.mu.Lock()
			s.stats.Webhooks.Delivered++
			s.hookedLocked(d.jobID)
			s.mu.Unlock()
			return
		}
		if attempt >= s.opts.WebhookAttempts || ctx.Err() != nil {
			s.mu.Lock()
			s.stats.Webhooks.Failed++
			if ctx.Err() == nil {
				s.hookedLocked(d.jobID) // given up; one cut short by Close is sent again next run
			}
			s.mu.Unlock()
			s.log.Warn("provider simulator gave up on a webhook", slog.String("job_id", d.jobID), slog.Int("attempt", attempt), slog.String("error", err.Error()))
			return
		}
		s.mu.Lock()
		s.stats.Webhooks.Retried++
		s.mu.Unlock()
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
		case <-t.C:
		}
		wait *= 2
	}
}

// hookedLocked records that a job's webhook needs no more sending.
func (s *Server) hookedLocked(jobID string) {
	if j := s.jobs[jobID]; j != nil && !j.hooked {
		j.hooked = true
		s.saveLocked(stateRecord{Job: j.record()})
	}
}

// post makes one signed attempt.
func (s *Server) post(ctx context.Context, d delivery) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, d.url, bytes.NewReader(d.body))
	if err != nil {
		return fmt.Errorf("build webhook request: %w", err)
	}
	ts := strconv.FormatInt(time.Now().Unix(), 10)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("webhook-id", d.msgID)
	req.Header.Set("webhook-timestamp", ts)
	req.Header.Set("webhook-signature", "v1,"+sign(s.hookKey, d.msgID, ts, d.body))
	resp, err := s.hookClient.Do(req)
	if err != nil {
		return errors.New("webhook receiver did not answer") // the error would repeat the URL
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("webhook receiver answered %d", resp.StatusCode)
	}
	return nil
}

// sign is the Standard Webhooks v1 signature: base64 HMAC-SHA256 of
// "id.timestamp.body".
func sign(key []byte, id, ts string, body []byte) string {
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(id + "." + ts + "."))
	mac.Write(body)
	return base64.StdEncoding.EncodeToString(mac.Sum(nil))
}

// decodeSecret reads a "whsec_<base64>" secret.
func decodeSecret(secret string) ([]byte, error) {
	rest, ok := strings.CutPrefix(secret, "whsec_")
	key, err := base64.StdEncoding.DecodeString(rest)
	if !ok || err != nil || len(key) == 0 {
		return nil, errors.New("provider simulator webhook secret must be whsec_ followed by base64")
	}
	return key, nil
}
