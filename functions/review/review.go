// Package review is the content review stage (seed 7.8.3): the optional
// REVIEW step of asset.postprocess, on its own consumer group
// (cg.asset.review.v1), that shows a pluggable HTTP moderation endpoint a
// few frames of a task's output and records its decision.
//
// # The product rule
//
//   - Approval: the task finishes normally. It reaches SUCCEEDED (billing
//     captures) once its derivatives are complete too, whichever finishes
//     last; both take the task's row lock and count ([stage.FinishMedia]),
//     so exactly one of them moves the task.
//   - Rejection: the task goes to FAILED with error code review.content_rejected
//     and the reviewer's reason code in its message, and it is CHARGED
//     (the reservation is captured, not released): the provider already
//     made the video and billed us for it ([task.Task.Charged]). Its stored
//     output is not served: its assets become FAILED with review.content_rejected
//     (kept in storage for a person), so the API hands out no download URL.
//   - Reviewer unavailable (connection refused, a timeout, 429, 5xx, any
//     other status that is not a decision, or an answer that is no
//     decision): a business wait, never a silent pass and never a failure
//     retry. The delivery is acknowledged, the review is recorded WAITING
//     and a delayed REVIEW is scheduled on asset.postprocess.delay with
//     exponential backoff and jitter (REVIEW_RETRY_BASE to
//     REVIEW_RETRY_MAX; a longer Retry-After wins). The task stays
//     MEDIA_PROCESSING. Past REVIEW_MAX_WAIT from the first failed call the
//     task goes to NEEDS_ATTENTION with review.unavailable, and a message a
//     person can act on; its reservation stays held until a person decides.
//   - A malformed answer counts as the reviewer being unavailable; it is
//     counted (task_reviews.malformed, aivedio_review_calls_total) and
//     logged.
//
// Whether a task needs review is decided once, by the probe (the
// task_reviews row it writes; shared/review). This stage treats a review
// with the endpoint unset as unavailable: a task promised a review never
// finishes without one.
//
// # The reviewer's HTTP contract
//
// POST REVIEW_URL with Content-Type application/json and the header
// X-Aivedio-Signature: sha256=<hex HMAC-SHA256 of the body under
// REVIEW_SECRET>:
//
//	{"task_id": "…", "tenant_id": "…", "asset_id": "…", "attempt": 1,
//	 "frames": [{"url": "https://…", "at_seconds": 0.5}, …],
//	 "expires_at": "2026-01-01T00:10:00Z"}
//
// The frame URLs are presigned GETs of JPEG frames the stage extracted
// with ffmpeg under the task's deterministic keys (…/review/frame-NN.jpg;
// it does not wait for the THUMBNAIL derivative, which runs
// concurrently), valid until expires_at (REVIEW_URL_TTL). A 2xx answer is
//
//	{"decision": "approve" | "reject", "reason_code": "…", "labels": ["…"], "reviewer": "…"}
//
// # Transactions
//
// ffmpeg, S3 and the HTTP call run outside any transaction: the stage
// reads the review, makes the frames and calls; then records the outcome
// in the delivery's inbox transaction, under the task's row lock, if the
// review is still where it was (its attempts count, which each delayed
// REVIEW names): a duplicate or a superseded REVIEW is a recorded no-op.
package review

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/aivedio/pipeline/functions/stage"
	"github.com/aivedio/pipeline/shared/aggregate"
	"github.com/aivedio/pipeline/shared/asset"
	"github.com/aivedio/pipeline/shared/blob"
	"github.com/aivedio/pipeline/shared/catalog"
	"github.com/aivedio/pipeline/shared/config"
	"github.com/aivedio/pipeline/shared/media"
	"github.com/aivedio/pipeline/shared/outbox"
	"github.com/aivedio/pipeline/shared/outcome"
	reviews "github.com/aivedio/pipeline/shared/review"
	"github.com/aivedio/pipeline/shared/task"
)

// Name is the stage's name.
const Name = "review"

// SignatureHeader carries the HMAC-SHA256 of a review request's body.
const SignatureHeader = "X-Aivedio-Signature"

// CodeUnavailable is the error code of a task whose reviewer stayed
// unavailable past REVIEW_MAX_WAIT.
const CodeUnavailable = "review.unavailable"

// maxAnswer bounds the reviewer's answer the stage reads.
const maxAnswer = 64 << 10

// maxRetryAfter bounds the Retry-After the stage honours: a reviewer
// asking for more is waited for no longer than this per call.
const maxRetryAfter = time.Hour

// sourceTTL bounds the presigned URL ffmpeg reads the output through.
const sourceTTL = 15 * time.Minute

// Params are what the stage needs.
type Params struct {
	Pool   *pgxpool.Pool
	Blob   *blob.Store
	Media  *media.Tool
	Config config.Review
	// Client calls the reviewer; one with Config.Timeout when nil.
	Client *http.Client
	TmpDir string // where ffmpeg writes frames; os.TempDir() when empty
	Logger *slog.Logger
	// Rand is the backoff's jitter in [0,1); math/rand when nil.
	Rand func() float64
}

type reviewer struct{ Params }

// New returns the review function.
func New(p Params) *stage.Function {
	if p.Client == nil {
		p.Client = &http.Client{Timeout: p.Config.Timeout}
	}
	if p.Rand == nil {
		p.Rand = rand.Float64
	}
	if p.Logger == nil {
		p.Logger = slog.New(slog.DiscardHandler)
	}
	s := &reviewer{Params: p}
	return stage.NewTyped(stage.Typed[task.Postprocess]{Group: catalog.GroupReview, DB: p.Pool, Logger: p.Logger, Work: s.work,
		Acts: func(t task.Task, _ task.Postprocess) bool { return task.PostprocessActs(t) }})
}

func (s *reviewer) work(ctx context.Context, d stage.Delivery[task.Postprocess]) error {
	req, t := d.Payload, d.Task
	if req.Step != catalog.TagReview {
		return outcome.Permanentf("payload.invalid", "the review stage handles step %s, not %q", catalog.TagReview, req.Step)
	}
	r, err := reviews.Get(ctx, s.Pool, t.ID)
	if errors.Is(err, reviews.ErrNotFound) {
		// The probe writes the row with the step: without one the event
		// was not the probe's (a hand-made replay), and there is nothing
		// to decide.
		d.Log.WarnContext(ctx, "REVIEW for a task that needs no content review")
		return d.Noop(ctx)
	}
	if err != nil {
		return err
	}
	if !r.Status.Open() || r.Attempts != req.RetryAttempt {
		return d.Noop(ctx) // decided, or a duplicate of a call already made
	}
	source, err := stage.ReadAsset(ctx, s.Pool, t, req.AssetID)
	if err != nil {
		return err
	}
	if source.ID != r.AssetID {
		return outcome.Permanentf("payload.invalid", "the content review of task %s is of asset %s, not %s", t.ID, r.AssetID, req.AssetID)
	}
	var frames []Frame
	if s.Config.On() {
		if frames, err = s.frames(ctx, d.Task, source); err != nil {
			if missing := stage.SourceMissing(ctx, s.Blob, source.ObjectKey); missing != nil {
				return d.Escalate(ctx, missing)
			}
			return err // ffmpeg or storage of ours: the adapter retries
		}
	}
	ans := s.ask(ctx, d, r, source, frames)
	if ans.err != nil {
		return ans.err
	}
	callsTotal.WithLabelValues(ans.outcome()).Inc()
	if ans.decision != nil {
		return s.decide(ctx, d, r, source, *ans.decision)
	}
	return s.wait(ctx, d, r, ans)
}

// answer is what one call brought: a decision, a reason the reviewer was
// unavailable, or an error of our own (our deadline) to retry.
type answer struct {
	decision   *reviews.Decision
	down       string // why it is no decision
	malformed  bool
	retryAfter time.Duration
	err        error
}

func (a answer) outcome() string {
	switch {
	case a.decision != nil && a.decision.Approve:
		return "approve"
	case a.decision != nil:
		return "reject"
	case a.malformed:
		return "malformed"
	}
	return "unavailable"
}

// request is the body of a review request.
type request struct {
	TaskID    uuid.UUID `json:"task_id"`
	TenantID  uuid.UUID `json:"tenant_id"`
	AssetID   uuid.UUID `json:"asset_id"`
	Attempt   int       `json:"attempt"`
	Frames    []Frame   `json:"frames"`
	ExpiresAt time.Time `json:"expires_at"`
}

// Frame is one sampled frame the reviewer is shown.
type Frame struct {
	URL       string  `json:"url"`
	AtSeconds float64 `json:"at_seconds"`
}

// reply is the reviewer's answer.
type reply struct {
	Decision   string   `json:"decision"`
	ReasonCode string   `json:"reason_code"`
	Labels     []string `json:"labels"`
	Reviewer   string   `json:"reviewer"`
}

// ask calls the reviewer once with frames.
func (s *reviewer) ask(ctx context.Context, d stage.Delivery[task.Postprocess], r reviews.Review, source stage.Asset, frames []Frame) answer {
	if !s.Config.On() {
		return answer{down: "REVIEW_URL is not set on the review stage, but the task was probed with content review on"}
	}
	body, err := json.Marshal(request{TaskID: d.Task.ID, TenantID: d.Task.TenantID, AssetID: source.ID, Attempt: r.Attempts + 1,
		Frames: frames, ExpiresAt: time.Now().Add(s.Config.URLTTL).UTC().Truncate(time.Second)})
	if err != nil {
		return answer{err: err}
	}
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, s.Config.URL, bytes.NewReader(body))
	if err != nil {
		return answer{down: "REVIEW_URL makes no request: " + err.Error()}
	}
	hreq.Header.Set("Content-Type", "application/json")
	hreq.Header.Set(SignatureHeader, Sign(s.Config.Secret, body))
	resp, err := s.Client.Do(hreq)
	if err != nil {
		if ctx.Err() != nil {
			return answer{err: ctx.Err()} // our own deadline: the adapter retries
		}
		return answer{down: "the reviewer is unreachable: " + err.Error()}
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
	if err != nil {
		return answer{down: "reading the reviewer's answer: " + err.Error()}
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return answer{down: fmt.Sprintf("the reviewer answered HTTP %d: %s", resp.StatusCode, snippet(data)),
			retryAfter: retryAfter(resp.Header.Get("Retry-After"), time.Now())}
	}
	var rep reply
	if err := json.Unmarshal(data, &rep); err != nil {
		return s.malformed(ctx, d, "the reviewer's answer is not JSON: "+err.Error())
	}
	switch rep.Decision {
	case "approve", "reject":
	default:
		return s.malformed(ctx, d, fmt.Sprintf("the reviewer's answer has decision %q, not approve or reject: %s", rep.Decision, snippet(data)))
	}
	reviewer := rep.Reviewer
	if reviewer == "" {
		reviewer = hreq.URL.Host
	}
	return answer{decision: &reviews.Decision{Approve: rep.Decision == "approve", ReasonCode: rep.ReasonCode, Labels: rep.Labels, Reviewer: reviewer}}
}

// malformed is an answer that is no decision: counted, logged, and
// treated as the reviewer being unavailable, never as a pass.
func (s *reviewer) malformed(ctx context.Context, d stage.Delivery[task.Postprocess], why string) answer {
	d.Log.WarnContext(ctx, "malformed content review answer; waiting as if the reviewer were down", slog.String("error", why))
	return answer{down: why, malformed: true}
}

// decide records the reviewer's decision and applies the product rule.
func (s *reviewer) decide(ctx context.Context, d stage.Delivery[task.Postprocess], r reviews.Review, source stage.Asset, dec reviews.Decision) error {
	return d.Apply(ctx, task.Guard(task.MediaProcessing), func(ctx context.Context, tx pgx.Tx, cur task.Task) (aggregate.Result, error) {
		ok, err := reviews.Decide(ctx, tx, cur.ID, r.Attempts, dec)
		if err != nil || !ok {
			return aggregate.Stale, err
		}
		if dec.Approve {
			d.Log.InfoContext(ctx, "content review approved", slog.String("reviewer", dec.Reviewer))
			return aggregate.Applied, stage.FinishMedia(ctx, tx, d.Origin, cur, source)
		}
		d.Log.InfoContext(ctx, "content review rejected", slog.String("reviewer", dec.Reviewer), slog.String("reason_code", dec.ReasonCode))
		msg := rejection(dec)
		if err := asset.Withhold(ctx, tx, cur.ID, task.ErrContentRejected, msg); err != nil {
			return 0, err
		}
		return aggregate.Applied, task.Fail(ctx, tx, d.Origin, cur, task.ErrContentRejected, msg)
	})
}

// rejection is the message of a task whose output the review rejected.
func rejection(dec reviews.Decision) string {
	reason := dec.ReasonCode
	if reason == "" {
		reason = "unspecified"
	}
	msg := "the content review rejected the output (reason " + reason
	if len(dec.Labels) > 0 {
		msg += "; labels " + strings.Join(dec.Labels, ", ")
	}
	return msg + "): it is not served, and the generation is charged because the provider charged for it"
}

// wait records a call that brought no decision: a delayed REVIEW with
// backoff, or past REVIEW_MAX_WAIT the task handed to a person.
func (s *reviewer) wait(ctx context.Context, d stage.Delivery[task.Postprocess], r reviews.Review, ans answer) error {
	now := time.Now()
	since := now
	if r.WaitingSince != nil {
		since = *r.WaitingSince
	}
	if now.Sub(since) >= s.Config.MaxWait {
		return s.giveUp(ctx, d, r, ans, since)
	}
	delay := stage.Backoff(r.Attempts, s.Config.Base, s.Config.Most, min(ans.retryAfter, maxRetryAfter), s.Rand())
	next := now.Add(delay)
	d.Log.WarnContext(ctx, "content reviewer unavailable; the task waits", slog.String("error", ans.down),
		slog.Int("attempt", r.Attempts+1), slog.Duration("retry_in", delay), slog.Time("waiting_since", since))
	return d.Apply(ctx, task.Guard(task.MediaProcessing), func(ctx context.Context, tx pgx.Tx, cur task.Task) (aggregate.Result, error) {
		ok, err := reviews.Wait(ctx, tx, cur.ID, r.Attempts, reviews.Unreachable{Error: ans.down, Malformed: ans.malformed, Next: next})
		if err != nil || !ok {
			return aggregate.Stale, err
		}
		e, err := d.Origin.EmitAt(cur, task.Postprocess{TaskID: cur.ID, AssetID: r.AssetID, Step: catalog.TagReview,
			Wait: task.Wait{ExpectedStatus: task.MediaProcessing, NotBefore: next, Reason: CodeUnavailable,
				RetryAttempt: r.Attempts + 1, WaitingSince: since}}, next)
		if err != nil {
			return 0, err
		}
		return aggregate.Applied, outbox.Write(ctx, tx, e)
	})
}

// giveUp hands the task to a person: the reviewer stayed unavailable past
// REVIEW_MAX_WAIT. Its reservation stays held; the person decides.
func (s *reviewer) giveUp(ctx context.Context, d stage.Delivery[task.Postprocess], r reviews.Review, ans answer, since time.Time) error {
	msg := fmt.Sprintf("the content reviewer at REVIEW_URL has been unavailable since %s (%d calls; last: %s), past REVIEW_MAX_WAIT %s; "+
		"the output was neither approved nor rejected, so it is not served and the reservation stays held: bring the reviewer back "+
		"(check REVIEW_URL, REVIEW_SECRET and the reviewer's logs), then decide the task by hand: approved, it finishes and is charged; rejected, it fails review.content_rejected and is charged",
		since.UTC().Format(time.RFC3339), r.Attempts+1, ans.down, s.Config.MaxWait)
	err := d.Apply(ctx, task.Guard(task.MediaProcessing).Into(task.NeedsAttention), func(ctx context.Context, tx pgx.Tx, cur task.Task) (aggregate.Result, error) {
		ok, err := reviews.GiveUp(ctx, tx, cur.ID, r.Attempts, ans.down)
		if err != nil || !ok {
			return aggregate.Stale, err
		}
		code := CodeUnavailable
		_, err = task.Apply(ctx, tx, d.Origin, cur, task.Transition{To: task.NeedsAttention, Reason: code,
			Set: task.Fields{ErrorCode: &code, ErrorMessage: &msg}})
		return aggregate.Applied, err
	})
	if err == nil {
		d.Log.WarnContext(ctx, "task needs attention", slog.String("error_code", CodeUnavailable), slog.String("error", msg))
	}
	return err
}

// frames extracts s.Config.Frames JPEG frames of the output, evenly spaced
// over its duration, under the task's deterministic keys (a later call
// reuses the ones stored), and presigns them.
func (s *reviewer) frames(ctx context.Context, t task.Task, source stage.Asset) ([]Frame, error) {
	n := max(s.Config.Frames, 1)
	out := make([]Frame, 0, n)
	var dir string
	defer func() {
		if dir != "" {
			_ = os.RemoveAll(dir)
		}
	}()
	for i := range n {
		at := time.Duration(source.DurationMS) * time.Millisecond * time.Duration(2*i+1) / time.Duration(2*n)
		key, err := FrameKey(t, i)
		if err != nil {
			return nil, outcome.Permanent("asset.bad_key", err)
		}
		if _, err := s.Blob.Stat(ctx, key); errors.Is(err, blob.ErrNotFound) {
			if dir == "" {
				if dir, err = os.MkdirTemp(s.TmpDir, "review-*"); err != nil {
					return nil, fmt.Errorf("make work directory: %w", err)
				}
			}
			if err := s.extract(ctx, source, key, filepath.Join(dir, fmt.Sprintf("frame-%02d.jpg", i)), at); err != nil {
				return nil, err
			}
		} else if err != nil {
			return nil, fmt.Errorf("look for review frame %s: %w", key, err)
		}
		url, err := s.Blob.PresignGet(ctx, key, s.Config.URLTTL)
		if err != nil {
			return nil, fmt.Errorf("presign review frame: %w", err)
		}
		out = append(out, Frame{URL: url, AtSeconds: at.Seconds()})
	}
	return out, nil
}

// extract makes one frame at at and stores it under key.
func (s *reviewer) extract(ctx context.Context, source stage.Asset, key, path string, at time.Duration) error {
	url, err := s.Blob.PresignGet(ctx, source.ObjectKey, sourceTTL)
	if err != nil {
		return fmt.Errorf("presign output: %w", err)
	}
	if err := s.Media.Thumbnail(ctx, url, path, at); err != nil {
		return outcome.Retryable("media.review_frame_failed", err)
	}
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return err
	}
	if _, err := s.Blob.Put(ctx, key, f, &blob.PutOpts{ContentType: "image/jpeg", Size: info.Size()}); err != nil {
		return fmt.Errorf("store review frame: %w", err)
	}
	return nil
}

// FrameKey is where frame i of t's review is stored.
func FrameKey(t task.Task, i int) (string, error) {
	return blob.Key(t.TenantID.String(), t.ID.String(), "review", fmt.Sprintf("frame-%02d.jpg", i))
}

// Sign is the signature header's value for body: sha256=<hex HMAC-SHA256
// of body under secret>.
func Sign(secret string, body []byte) string {
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write(body)
	return "sha256=" + hex.EncodeToString(mac.Sum(nil))
}

// Verify reports whether header is body's signature under secret, in
// constant time.
func Verify(secret string, body []byte, header string) bool {
	return hmac.Equal([]byte(Sign(secret, body)), []byte(header))
}

// retryAfter parses a Retry-After header: seconds or an HTTP date; zero
// when absent or unreadable.
func retryAfter(v string, now time.Time) time.Duration {
	if v == "" {
		return 0
	}
	if secs, err := strconv.Atoi(strings.TrimSpace(v)); err == nil && secs > 0 {
		return time.Duration(secs) * time.Second
	}
	if at, err := http.ParseTime(v); err == nil && at.After(now) {
		return at.Sub(now)
	}
	return 0
}

// snippet is the start of an answer, for a message.
func snippet(data []byte) string {
	s := strings.TrimSpace(string(data))
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return s
}

// callsTotal counts the reviewer's answers by outcome. Process-wide, like
// the stage framework's series: a deployed function serves one stage.
var callsTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "aivedio_review_calls_total",
	Help: "Calls to the content reviewer by outcome: approve, reject, unavailable (refused, timed out, 429, 5xx), malformed (an answer that is no decision; waited on like unavailable).",
}, []string{"outcome"})

// Collectors export the review stage's series; register them once per
// registry.
func Collectors() []prometheus.Collector { return []prometheus.Collector{callsTotal} }
