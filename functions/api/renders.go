package api

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/aivedio/pipeline/shared/aggregate"
	"github.com/aivedio/pipeline/shared/asset"
	"github.com/aivedio/pipeline/shared/billing"
	"github.com/aivedio/pipeline/shared/live"
	"github.com/aivedio/pipeline/shared/media"
	"github.com/aivedio/pipeline/shared/outbox"
	"github.com/aivedio/pipeline/shared/project"
	"github.com/aivedio/pipeline/shared/render"
	"github.com/aivedio/pipeline/shared/task"
	"github.com/aivedio/pipeline/shared/tenant"
)

// CodeRenderFinished: the render is over and cannot be canceled.
const CodeRenderFinished = "render_finished"

type renderBody struct {
	ProjectRevisionID string `json:"project_revision_id"`
	Profile           string `json:"profile"`
}

// renderView is a render as GET /v1/renders/{id} answers it.
type renderView struct {
	RenderID          uuid.UUID     `json:"render_id"`
	Status            render.Status `json:"status"`
	Version           int64         `json:"version"`
	ProjectRevisionID uuid.UUID     `json:"project_revision_id"`
	Profile           string        `json:"profile"`
	DurationSeconds   float64       `json:"duration_seconds"`
	// Progress is a percent: the chunks stored, and live what ffmpeg has
	// written of the ones rendering.
	Progress int           `json:"progress"`
	Output   *renderOutput `json:"output"`
	// Reused: an identical render stored this output before; nothing ran
	// and nothing is charged.
	Reused     bool         `json:"reused"`
	Error      *errorDetail `json:"error"`
	CreatedAt  time.Time    `json:"created_at"`
	UpdatedAt  time.Time    `json:"updated_at"`
	FinishedAt *time.Time   `json:"finished_at,omitempty"`
}

type renderOutput struct {
	AssetID         uuid.UUID `json:"asset_id"`
	DownloadURL     string    `json:"download_url,omitempty"`
	DurationSeconds *float64  `json:"duration_seconds"`
	Width           *int      `json:"width"`
	Height          *int      `json:"height"`
	SizeBytes       int64     `json:"size_bytes"`
	SHA256          string    `json:"sha256"`
}

// renderRef is the answer of creating and canceling a render.
type renderRef struct {
	RenderID uuid.UUID     `json:"render_id"`
	Status   render.Status `json:"status"`
	Version  int64         `json:"version"`
}

// createRender serves POST /v1/renders: 202 for a new render, 200 with the
// existing one for a repeat under the same Idempotency-Key. One
// transaction writes the render, its credit reservation (priced by output
// seconds and profile) and render.export.requested.
func (s *Server) createRender(w http.ResponseWriter, r *http.Request, p tenant.Principal) *apiError {
	if e := s.shed.refuseRender(p); e != nil {
		s.log.InfoContext(r.Context(), "render shed", slog.String("tenant_id", p.TenantID.String()), slog.Int("priority", p.Priority))
		return e
	}
	key, e := idempotencyKey(r.Header)
	if e != nil {
		return e
	}
	var body renderBody
	if e := decodeJSON(w, r, s.limits.MaxBodyBytes, &body); e != nil {
		return e
	}
	revisionID, err := uuid.Parse(body.ProjectRevisionID)
	if err != nil || len(body.ProjectRevisionID) != 36 {
		return errorf(http.StatusBadRequest, CodeInvalidField, "project_revision_id is required: the revision_id POST /v1/projects/{id}/revisions answered")
	}
	if _, ok := media.Profiles[body.Profile]; !ok {
		return errorf(http.StatusBadRequest, CodeInvalidField, "profile %q is not offered; use one of %s", truncate(body.Profile, 64), strings.Join(profileNames(), ", "))
	}
	ctx, cancel := context.WithTimeout(r.Context(), dbTimeout)
	defer cancel()
	rev, err := project.GetRevision(ctx, s.pool, p.TenantID, revisionID)
	if errors.Is(err, project.ErrNotFound) {
		return errorf(http.StatusNotFound, CodeNotFound, "no project revision %s", revisionID)
	}
	if err != nil {
		return s.internal(ctx, "read revision", err)
	}
	checksums, e := s.inputChecksums(ctx, p.TenantID, rev.Spec.Assets())
	if e != nil {
		return e
	}
	renderKey, err := render.Key(rev.Spec, checksums, body.Profile, media.EncoderVersion)
	if err != nil {
		return s.internal(ctx, "render key", err)
	}
	hash := sha256.Sum256([]byte(revisionID.String() + "\n" + body.Profile))
	var (
		j       render.Job
		created bool
	)
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var err error
		j, created, err = render.Create(ctx, tx, render.New{TenantID: p.TenantID, RevisionID: rev.ID, SpecID: hex.EncodeToString(rev.Spec.Hash()),
			Profile: body.Profile, Key: renderKey, DurationUS: rev.Spec.DurationUS, Priority: p.Priority,
			IdempotencyKey: key, RequestHash: hash[:]})
		if err != nil || !created {
			return err
		}
		if err := s.checkQuota(ctx, tx, p.TenantID, asset.Usage{Assets: 1}, false); err != nil {
			return err
		}
		amount := s.renderPrice.Of(body.Profile, rev.Spec.DurationUS)
		if err := billing.ReserveRender(ctx, tx, p.TenantID, j.ID, amount); err != nil {
			if errors.Is(err, billing.ErrInsufficientCredits) {
				return s.insufficientRenderCredits(ctx, tx, p.TenantID, amount)
			}
			return err
		}
		start, err := j.Ask(origin, task.RenderStart, 0)
		if err != nil {
			return err
		}
		changed, err := render.Changed(origin, j, "")
		if err != nil {
			return err
		}
		return outbox.Write(ctx, tx, changed, start)
	})
	var ae *apiError
	switch {
	case errors.As(err, &ae):
		return ae
	case errors.Is(err, render.ErrIdempotencyConflict):
		return errorf(http.StatusConflict, CodeIdempotencyConflict,
			"Idempotency-Key %q was already used for a different render (render %s); use a new key for a new render, or resend the original request unchanged",
			key, j.ID)
	case err != nil:
		return s.internal(ctx, "create render", err)
	}
	w.Header().Set("Location", "/v1/renders/"+j.ID.String())
	ref := renderRef{RenderID: j.ID, Status: j.Status, Version: j.Version}
	if !created {
		w.Header().Set("Idempotent-Replayed", "true")
		writeJSON(w, http.StatusOK, ref)
		return nil
	}
	s.log.InfoContext(ctx, "render accepted", slog.String("render_id", j.ID.String()), slog.String("tenant_id", p.TenantID.String()),
		slog.String("profile", j.Profile), slog.Float64("duration_seconds", float64(j.DurationUS)/1e6), slog.String("request_id", requestID(ctx)))
	writeJSON(w, http.StatusAccepted, ref)
	return nil
}

func profileNames() []string {
	names := make([]string, 0, len(media.Profiles))
	for n := range media.Profiles {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// inputChecksums reads the sha256 of every input of a revision: an input
// that is no longer READY, or that a content review holds back, cannot be
// rendered.
func (s *Server) inputChecksums(ctx context.Context, tenantID uuid.UUID, ids []uuid.UUID) (map[uuid.UUID][]byte, *apiError) {
	out := make(map[uuid.UUID][]byte, len(ids))
	for _, id := range ids {
		a, err := asset.OfTenant(ctx, s.pool, tenantID, id)
		if errors.Is(err, asset.ErrNotFound) {
			return nil, errorf(http.StatusUnprocessableEntity, CodeInvalidTimeline, "input asset %s of the revision no longer exists", id)
		}
		if err != nil {
			return nil, s.internal(ctx, "read render input", err)
		}
		if !a.Usable() {
			return nil, errorf(http.StatusUnprocessableEntity, CodeInvalidTimeline, "input %s of the revision cannot be rendered", a.Unusable())
		}
		out[id] = a.SHA256
	}
	return out, nil
}

// insufficientRenderCredits is the 402 that says what the render needs and
// what the tenant has.
func (s *Server) insufficientRenderCredits(ctx context.Context, tx pgx.Tx, tenantID uuid.UUID, amount int64) error {
	acct, err := billing.GetAccount(ctx, tx, tenantID)
	if err != nil {
		return err
	}
	return errorf(http.StatusPaymentRequired, CodeInsufficientCredits,
		"this render needs %d credits but only %d are available (balance %d, of which %d are held by unfinished work); top up, or render a shorter timeline or a smaller profile",
		amount, acct.Available(), acct.Balance, acct.Reserved)
}

func renderID(r *http.Request) (uuid.UUID, *apiError) {
	return pathID(r, "render id", "POST /v1/renders")
}

func renderNotFound(id uuid.UUID) *apiError {
	return errorf(http.StatusNotFound, CodeNotFound, "no render %s", id)
}

// getRender serves GET /v1/renders/{id}.
func (s *Server) getRender(w http.ResponseWriter, r *http.Request, p tenant.Principal) *apiError {
	id, e := renderID(r)
	if e != nil {
		return e
	}
	ctx, cancel := context.WithTimeout(r.Context(), dbTimeout)
	defer cancel()
	j, err := render.OfTenant(ctx, s.pool, p.TenantID, id)
	if errors.Is(err, render.ErrNotFound) {
		return renderNotFound(id)
	}
	if err != nil {
		return s.internal(ctx, "read render", err)
	}
	v := renderView{RenderID: j.ID, Status: j.Status, Version: j.Version, ProjectRevisionID: j.RevisionID, Profile: j.Profile,
		DurationSeconds: float64(j.DurationUS) / 1e6, Progress: j.Progress, Reused: j.Reused,
		CreatedAt: j.CreatedAt, UpdatedAt: j.UpdatedAt, FinishedAt: j.FinishedAt}
	if j.ErrorCode != "" {
		v.Error = &errorDetail{Code: j.ErrorCode, Message: j.ErrorMessage}
	}
	if j.Status == render.Rendering {
		v.Progress = max(v.Progress, s.liveRenderProgress(ctx, j))
	}
	if j.OutputAssetID != nil {
		a, err := asset.OfTenant(ctx, s.pool, p.TenantID, *j.OutputAssetID)
		if err != nil {
			return s.internal(ctx, "read render output", err)
		}
		av := assetViewOf(a)
		s.presignView(ctx, &av)
		v.Output = &renderOutput{AssetID: a.ID, DownloadURL: av.DownloadURL, DurationSeconds: av.DurationSeconds,
			Width: a.Width, Height: a.Height, SizeBytes: a.SizeBytes, SHA256: av.SHA256}
	}
	writeJSON(w, http.StatusOK, v)
	return nil
}

// liveRenderProgress is the percent of a running render done: its stored
// chunks, and what ffmpeg reported of the ones rendering. Redis being
// away costs only the live part.
func (s *Server) liveRenderProgress(ctx context.Context, j render.Job) int {
	chunks, err := render.Chunks(ctx, s.pool, j.TenantID, j.Key)
	if err != nil || j.DurationUS <= 0 {
		return 0
	}
	running, err := live.ChunkProgress(ctx, s.rdb, j.ID)
	if err != nil {
		s.log.DebugContext(ctx, "live render progress unavailable", slog.String("error", err.Error()))
	}
	var done int64
	for _, c := range chunks {
		if c.Status == render.ChunkDone {
			done += c.DurationUS()
		} else {
			done += min(max(running[c.Window.Index], 0), c.DurationUS())
		}
	}
	return min(99, int(done*100/j.DurationUS))
}

// cancelRender serves POST /v1/renders/{id}/cancel: a render not over yet
// ends CANCELED at once, with the settle event that releases its
// reservation, in one transaction (200); a chunk rendering stops its
// ffmpeg within a second and stores nothing. A finished render is 409.
func (s *Server) cancelRender(w http.ResponseWriter, r *http.Request, p tenant.Principal) *apiError {
	id, e := renderID(r)
	if e != nil {
		return e
	}
	ctx, cancel := context.WithTimeout(r.Context(), dbTimeout)
	defer cancel()
	var j render.Job
	ours := aggregate.Transition[render.Status, render.Job]{If: func(cur render.Job) bool { return cur.TenantID == p.TenantID }}
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		res, err := aggregate.Apply(ctx, tx, render.Kind, id, ours, func(ctx context.Context, tx pgx.Tx, cur render.Job) (aggregate.Result, error) {
			if cur.Status.Terminal() {
				j = cur
				return 0, errorf(http.StatusConflict, CodeRenderFinished, "render %s is %s already; there is nothing to cancel", id, cur.Status)
			}
			var err error
			j, err = render.Apply(ctx, tx, origin, cur, render.Change{To: render.Canceled})
			return aggregate.Applied, err
		})
		if err == nil && res == aggregate.Stale {
			return render.ErrNotFound // another tenant's
		}
		return err
	})
	var ae *apiError
	switch {
	case errors.Is(err, render.ErrNotFound):
		return renderNotFound(id)
	case errors.As(err, &ae):
		return ae
	case err != nil:
		return s.internal(ctx, "cancel render", err)
	}
	s.log.InfoContext(ctx, "render canceled", slog.String("render_id", id.String()), slog.String("tenant_id", p.TenantID.String()),
		slog.String("request_id", requestID(ctx)))
	writeJSON(w, http.StatusOK, renderRef{RenderID: j.ID, Status: j.Status, Version: j.Version})
	return nil
}
