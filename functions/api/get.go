package api

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"path"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/aivedio/pipeline/shared/asset"
	"github.com/aivedio/pipeline/shared/attempt"
	"github.com/aivedio/pipeline/shared/blob"
	"github.com/aivedio/pipeline/shared/live"
	reviews "github.com/aivedio/pipeline/shared/review"
	"github.com/aivedio/pipeline/shared/task"
	"github.com/aivedio/pipeline/shared/tenant"
	"github.com/aivedio/pipeline/shared/waitlist"
)

// generationView is the answer of GET /v1/generations/{id}.
type generationView struct {
	TaskID          uuid.UUID   `json:"task_id"`
	Status          task.Status `json:"status"`
	Version         int64       `json:"version"`
	Progress        int         `json:"progress"`
	CancelRequested bool        `json:"cancel_requested"`
	Model           string      `json:"model"`
	Prompt          string      `json:"prompt"`
	DurationSeconds int         `json:"duration_seconds"`
	Resolution      string      `json:"resolution"`
	InputAssetIDs   []uuid.UUID `json:"input_asset_ids"`
	Priority        int         `json:"priority"`
	// MissingDerivatives: optional outputs (THUMBNAIL, WAVEFORM) the task
	// finished without; they are retried in the background.
	MissingDerivatives []string      `json:"missing_derivatives,omitempty"`
	Attempts           []attemptView `json:"attempts"`
	Outputs            []output      `json:"outputs"`
	Error              *errorDetail  `json:"error"`
	// Review is the task's content review; absent when none was required.
	Review *reviewView `json:"review,omitempty"`
	// Queue is where a task waiting for a provider slot stands on the wait
	// list; absent otherwise.
	Queue     *waitlist.Queue `json:"queue,omitempty"`
	CreatedAt time.Time       `json:"created_at"`
	UpdatedAt time.Time       `json:"updated_at"`
}

// attemptView is one submission to a provider. The provider's idempotency key
// and job id stay inside: they are ours, not the client's.
type attemptView struct {
	AttemptNo        int        `json:"attempt_no"`
	Status           string     `json:"status"`
	Provider         string     `json:"provider"`
	Model            string     `json:"model"` // the model's name at Provider
	ErrorCode        string     `json:"error_code,omitempty"`
	CreatedAt        time.Time  `json:"created_at"`
	RequestStartedAt *time.Time `json:"request_started_at,omitempty"`
	ResponseAt       *time.Time `json:"response_at,omitempty"`
	UpdatedAt        time.Time  `json:"updated_at"`
}

// output is an asset the task produced, with a short-lived download URL.
type output struct {
	AssetID      uuid.UUID  `json:"asset_id"`
	Kind         string     `json:"kind"`
	ContentType  string     `json:"content_type"`
	SizeBytes    int64      `json:"size_bytes"`
	DurationMS   *int64     `json:"duration_ms,omitempty"`
	Width        *int       `json:"width,omitempty"`
	Height       *int       `json:"height,omitempty"`
	DownloadURL  string     `json:"download_url,omitempty"`
	URLExpiresAt *time.Time `json:"download_url_expires_at,omitempty"`
	CreatedAt    time.Time  `json:"created_at"`
	objectKey    string
}

// reviewView is the content review of a task's output (docs/journey.md, "Content
// review"): what the reviewer decided and why, or why it is still waiting.
type reviewView struct {
	Status     reviews.Status `json:"status"`
	Decision   string         `json:"decision,omitempty"`
	ReasonCode string         `json:"reason_code,omitempty"`
	Labels     []string       `json:"labels,omitempty"`
	Reviewer   string         `json:"reviewer,omitempty"`
	Attempts   int            `json:"attempts"`
	// LastError says why the last call brought no decision, while the
	// review waits for the reviewer.
	LastError     string     `json:"last_error,omitempty"`
	RequestedAt   time.Time  `json:"requested_at"`
	NextAttemptAt *time.Time `json:"next_attempt_at,omitempty"`
	DecidedAt     *time.Time `json:"decided_at,omitempty"`
}

func reviewViewOf(r reviews.Review) *reviewView {
	v := &reviewView{Status: r.Status, Decision: r.Decision, ReasonCode: r.ReasonCode, Labels: r.Labels, Reviewer: r.Reviewer,
		Attempts: r.Attempts, RequestedAt: r.RequestedAt, DecidedAt: r.DecidedAt}
	if r.Status == reviews.Waiting {
		v.LastError, v.NextAttemptAt = r.LastError, &r.NextAttemptAt
	}
	return v
}

type errorDetail struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// taskID parses the {id} of the path.
func taskID(r *http.Request) (uuid.UUID, *apiError) {
	return pathID(r, "task id", "POST /v1/generations")
}

// taskNotFound is the same answer for a task that does not exist and a
// task of another tenant: the body must not tell them apart.
func taskNotFound() *apiError {
	return errorf(http.StatusNotFound, CodeNotFound, "no such generation for this API key's tenant; check the task id returned by POST /v1/generations")
}

// getGeneration serves GET /v1/generations/{id}.
func (s *Server) getGeneration(w http.ResponseWriter, r *http.Request, p tenant.Principal) *apiError {
	id, e := taskID(r)
	if e != nil {
		return e
	}
	ctx, cancel := context.WithTimeout(r.Context(), dbTimeout)
	defer cancel()
	var v generationView
	served := true
	// One snapshot: the task, its attempts and outputs as of one moment.
	err := pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		t, err := task.GetForTenant(ctx, tx, p.TenantID, id)
		if err != nil {
			return err
		}
		v = viewOf(t)
		if v.Attempts, err = readAttempts(ctx, tx, t.ID); err != nil {
			return err
		}
		if v.Outputs, err = readOutputs(ctx, tx, p.TenantID, t.ID); err != nil {
			return err
		}
		served = t.Served()
		if t.Status == task.WaitingRetry {
			if v.Queue, err = waitlist.Position(ctx, tx, t.ID); err != nil {
				return err
			}
		}
		r, err := reviews.Get(ctx, tx, t.ID)
		if errors.Is(err, reviews.ErrNotFound) {
			return nil
		}
		if err == nil {
			v.Review = reviewViewOf(r)
			// Nothing is handed out before the review approved it.
			served = served && r.Status == reviews.Approved
		}
		return err
	})
	if errors.Is(err, task.ErrNotFound) {
		return taskNotFound()
	}
	if err != nil {
		return s.internal(ctx, "read generation", err)
	}
	if v.Status == task.ProviderRunning {
		v.Progress = s.liveProgress(ctx, id, v.Progress)
	}
	if served {
		// An output the content review has not approved (pending,
		// waiting, unavailable or rejected) is listed, never handed out:
		// no download URL (docs/journey.md, "Content review").
		s.presign(ctx, v.Outputs)
	}
	w.Header().Set("Cache-Control", "no-store") // it may hold presigned URLs
	writeJSON(w, http.StatusOK, v)
	return nil
}

func viewOf(t task.Task) generationView {
	v := generationView{
		TaskID: t.ID, Status: t.Status, Version: t.Version, Progress: t.Progress, CancelRequested: t.CancelRequested,
		Model: t.Model, Prompt: t.Prompt, DurationSeconds: t.DurationSeconds, Resolution: t.Resolution,
		InputAssetIDs: t.InputAssetIDs, Priority: t.Priority, CreatedAt: t.CreatedAt, UpdatedAt: t.UpdatedAt,
		Attempts: []attemptView{}, Outputs: []output{}, MissingDerivatives: t.MissingDerivatives,
	}
	if v.InputAssetIDs == nil {
		v.InputAssetIDs = []uuid.UUID{}
	}
	if t.ErrorCode != "" || t.ErrorMessage != "" {
		v.Error = &errorDetail{Code: t.ErrorCode, Message: t.ErrorMessage}
	}
	return v
}

func readAttempts(ctx context.Context, tx pgx.Tx, id uuid.UUID) ([]attemptView, error) {
	all, err := attempt.List(ctx, tx, id)
	if err != nil {
		return nil, err
	}
	out := make([]attemptView, len(all))
	for i, a := range all {
		out[i] = attemptView{AttemptNo: a.No, Status: string(a.Status), Provider: a.Provider, Model: a.Model, ErrorCode: a.ErrorCode,
			CreatedAt: a.CreatedAt, RequestStartedAt: a.RequestStartedAt, ResponseAt: a.ResponseAt, UpdatedAt: a.UpdatedAt}
	}
	return out, nil
}

func readOutputs(ctx context.Context, tx pgx.Tx, tenantID, id uuid.UUID) ([]output, error) {
	all, err := asset.OfTenantTask(ctx, tx, tenantID, id)
	if err != nil {
		return nil, err
	}
	out := make([]output, len(all))
	for i, a := range all {
		out[i] = output{AssetID: a.ID, Kind: string(a.Kind), ContentType: a.ContentType, SizeBytes: a.SizeBytes, DurationMS: a.DurationMS,
			Width: a.Width, Height: a.Height, CreatedAt: a.CreatedAt, objectKey: a.ObjectKey}
	}
	return out, nil
}

// progressTimeout bounds the Redis read of a task's live progress: a
// number that only decorates the answer is not worth a slow one.
const progressTimeout = time.Second

// liveProgress is the progress of a running task (package progress): the
// larger of what the poll stage recorded in Redis, which is fresher, and
// stored, which the poll stage merges by step or interval and which
// outlives Redis. Without a live value (expired, or Redis lost its data),
// or when Redis fails, it is stored: a missing decoration is logged, never
// a failed request.
func (s *Server) liveProgress(ctx context.Context, id uuid.UUID, stored int) int {
	pctx, cancel := context.WithTimeout(ctx, progressTimeout)
	defer cancel()
	p, ok, err := live.Progress(pctx, s.rdb, id)
	if err != nil {
		s.log.WarnContext(ctx, "read live progress; answering the stored progress", slog.String("task_id", id.String()),
			slog.String("error", err.Error()), slog.String("request_id", requestID(ctx)))
		return stored
	}
	if !ok {
		return stored
	}
	return max(p, stored)
}

// downloadName is the file name a download is saved under: the name an
// upload had, else its object's ("output.mp4", "thumbnail.jpg").
func downloadName(filename, objectKey string) string {
	if filename != "" {
		return filename
	}
	return path.Base(objectKey)
}

// presign adds download URLs. A URL that cannot be made is left out and
// logged (without the URL): the rest of the answer still helps the client.
func (s *Server) presign(ctx context.Context, outs []output) {
	if s.blob == nil {
		return
	}
	for i := range outs {
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		expires := time.Now().Add(s.downloadTTL).UTC().Truncate(time.Second)
		url, err := s.blob.PresignDownload(pctx, outs[i].objectKey, s.downloadTTL,
			blob.Download{Filename: downloadName("", outs[i].objectKey), ContentType: outs[i].ContentType})
		cancel()
		if err != nil {
			s.log.ErrorContext(ctx, "presign output download", slog.String("asset_id", outs[i].AssetID.String()),
				slog.String("error", err.Error()), slog.String("request_id", requestID(ctx)))
			continue
		}
		outs[i].DownloadURL = url
		outs[i].URLExpiresAt = &expires
	}
}
