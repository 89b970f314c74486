package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/aivedio/pipeline/shared/asset"
	"github.com/aivedio/pipeline/shared/project"
	"github.com/aivedio/pipeline/shared/tenant"
	"github.com/aivedio/pipeline/shared/timeline"
)

// Limits of the project API that are part of the API, not configuration.
const (
	MaxProjectName = 200
	// MaxRevisionBytes bounds a posted timeline: an OpenTimelineIO document
	// of MaxClips clips, pretty-printed, stays well below it.
	MaxRevisionBytes = 1 << 20
)

type projectBody struct {
	Name string `json:"name"`
}

type projectRef struct {
	ProjectID uuid.UUID `json:"project_id"`
	Name      string    `json:"name"`
	CreatedAt time.Time `json:"created_at"`
}

// revisionBody is POST /v1/projects/{id}/revisions: exactly one of the
// two forms.
type revisionBody struct {
	Timeline json.RawMessage `json:"timeline"`
	OTIO     json.RawMessage `json:"otio"`
}

type revisionView struct {
	RevisionID      uuid.UUID      `json:"revision_id"`
	ProjectID       uuid.UUID      `json:"project_id"`
	Format          string         `json:"format"`
	DurationSeconds float64        `json:"duration_seconds"`
	Spec            *timeline.Spec `json:"spec,omitempty"`
	CreatedAt       time.Time      `json:"created_at"`
}

func revisionViewOf(r project.Revision, withSpec bool) revisionView {
	v := revisionView{RevisionID: r.ID, ProjectID: r.ProjectID, Format: r.Format, DurationSeconds: float64(r.Spec.DurationUS) / 1e6, CreatedAt: r.CreatedAt}
	if withSpec {
		v.Spec = &r.Spec
	}
	return v
}

// createProject serves POST /v1/projects.
func (s *Server) createProject(w http.ResponseWriter, r *http.Request, p tenant.Principal) *apiError {
	var body projectBody
	if e := decodeJSON(w, r, s.limits.MaxBodyBytes, &body); e != nil {
		return e
	}
	name := strings.TrimSpace(body.Name)
	if name == "" || utf8.RuneCountInString(name) > MaxProjectName || strings.ContainsFunc(name, func(r rune) bool { return r < ' ' }) {
		return errorf(http.StatusBadRequest, CodeInvalidField, "name is required: 1 to %d characters, no control characters", MaxProjectName)
	}
	ctx, cancel := context.WithTimeout(r.Context(), dbTimeout)
	defer cancel()
	pr, err := project.Create(ctx, s.pool, p.TenantID, name)
	if err != nil {
		return s.internal(ctx, "create project", err)
	}
	writeJSON(w, http.StatusCreated, projectRef{ProjectID: pr.ID, Name: pr.Name, CreatedAt: pr.CreatedAt})
	return nil
}

// getProject serves GET /v1/projects/{id}: the project and a page of its
// revisions, oldest first, as summaries (no source, no spec: GET
// .../revisions/{r} has those); ?limit= and ?cursor= as GET /v1/assets.
func (s *Server) getProject(w http.ResponseWriter, r *http.Request, p tenant.Principal) *apiError {
	pr, e := s.tenantProject(r, p)
	if e != nil {
		return e
	}
	limit, e := pageSize(r)
	if e != nil {
		return e
	}
	ctx, cancel := context.WithTimeout(r.Context(), dbTimeout)
	defer cancel()
	revs, next, err := project.RevisionPage(ctx, s.pool, pr, r.URL.Query().Get("cursor"), limit)
	if errors.Is(err, project.ErrBadCursor) {
		return errorf(http.StatusBadRequest, CodeInvalidField, "cursor is not one GET /v1/projects/%s returned; start again without it", pr.ID)
	}
	if err != nil {
		return s.internal(ctx, "list revisions", err)
	}
	views := make([]revisionView, len(revs))
	for i, rv := range revs {
		views[i] = revisionView{RevisionID: rv.ID, ProjectID: pr.ID, Format: rv.Format, DurationSeconds: float64(rv.DurationUS) / 1e6, CreatedAt: rv.CreatedAt}
	}
	writeJSON(w, http.StatusOK, struct {
		projectRef
		Revisions  []revisionView `json:"revisions"`
		NextCursor string         `json:"next_cursor,omitempty"`
	}{projectRef{ProjectID: pr.ID, Name: pr.Name, CreatedAt: pr.CreatedAt}, views, next})
	return nil
}

func (s *Server) tenantProject(r *http.Request, p tenant.Principal) (project.Project, *apiError) {
	id, e := pathID(r, "project id", "POST /v1/projects")
	if e != nil {
		return project.Project{}, e
	}
	pr, err := project.Get(r.Context(), s.pool, p.TenantID, id)
	if errors.Is(err, project.ErrNotFound) {
		return project.Project{}, errorf(http.StatusNotFound, CodeNotFound, "no project %s", id)
	}
	if err != nil {
		return project.Project{}, s.internal(r.Context(), "read project", err)
	}
	return pr, nil
}

// createRevision serves POST /v1/projects/{id}/revisions: the timeline,
// shorthand or OpenTimelineIO, lowered and checked against the tenant's
// assets; 201 with a new revision, 200 with the existing one for the same
// content.
func (s *Server) createRevision(w http.ResponseWriter, r *http.Request, p tenant.Principal) *apiError {
	pr, e := s.tenantProject(r, p)
	if e != nil {
		return e
	}
	var body revisionBody
	if e := decodeJSON(w, r, MaxRevisionBytes, &body); e != nil {
		return e
	}
	hasTimeline, hasOTIO := present(body.Timeline), present(body.OTIO)
	if hasTimeline == hasOTIO {
		return errorf(http.StatusBadRequest, CodeInvalidField, "send exactly one of timeline (the shorthand) and otio (OpenTimelineIO JSON)")
	}
	ctx, cancel := context.WithTimeout(r.Context(), dbTimeout)
	defer cancel()
	resolve := s.assetResolver(ctx, p.TenantID)
	var (
		spec   timeline.Spec
		format string
		source json.RawMessage
		err    error
	)
	if hasTimeline {
		format, source = project.FormatTimeline, body.Timeline
		var sh timeline.Shorthand
		dec := json.NewDecoder(bytes.NewReader(body.Timeline))
		dec.DisallowUnknownFields()
		if derr := dec.Decode(&sh); derr != nil {
			return errorf(http.StatusBadRequest, CodeInvalidTimeline, "timeline: %s", strings.TrimPrefix(derr.Error(), "json: "))
		}
		spec, err = sh.Lower(resolve.lookup)
	} else {
		format, source = project.FormatOTIO, body.OTIO
		var o timeline.OTIO
		if o, err = timeline.ParseOTIO(body.OTIO); err == nil {
			spec, err = o.Lower(resolve.lookup)
		}
	}
	if resolve.err != nil {
		return s.internal(ctx, "read timeline assets", resolve.err)
	}
	var te *timeline.Error
	if errors.As(err, &te) {
		return errorf(http.StatusUnprocessableEntity, CodeInvalidTimeline, "%s: %s", te.Path, te.Message)
	}
	if err != nil {
		return s.internal(ctx, "lower timeline", err)
	}
	rev, created, err := project.AddRevision(ctx, s.pool, pr, format, source, spec, project.MaxRevisions)
	if errors.Is(err, project.ErrTooManyRevisions) {
		return errorf(http.StatusConflict, CodeQuotaExceeded, "project %s holds %d revisions, the most a project may; make a new project", pr.ID, project.MaxRevisions)
	}
	if err != nil {
		return s.internal(ctx, "record revision", err)
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
		s.log.InfoContext(ctx, "revision recorded", slog.String("project_id", pr.ID.String()), slog.String("revision_id", rev.ID.String()),
			slog.Int("clips", len(spec.Clips)), slog.Float64("duration_seconds", spec.Duration().Seconds()), slog.String("request_id", requestID(ctx)))
	}
	writeJSON(w, status, revisionViewOf(rev, false))
	return nil
}

// getRevision serves GET /v1/projects/{id}/revisions/{revision}: the
// revision with its render spec.
func (s *Server) getRevision(w http.ResponseWriter, r *http.Request, p tenant.Principal) *apiError {
	pr, e := s.tenantProject(r, p)
	if e != nil {
		return e
	}
	raw := r.PathValue("revision")
	id, err := uuid.Parse(raw)
	if err != nil || len(raw) != 36 {
		return errorf(http.StatusBadRequest, CodeInvalidID, "%q is not a revision id; it is a UUID as returned by POST /v1/projects/{id}/revisions", truncate(raw, 64))
	}
	rev, err := project.GetRevision(r.Context(), s.pool, p.TenantID, id)
	if errors.Is(err, project.ErrNotFound) || (err == nil && rev.ProjectID != pr.ID) {
		return errorf(http.StatusNotFound, CodeNotFound, "no revision %s in project %s", id, pr.ID)
	}
	if err != nil {
		return s.internal(r.Context(), "read revision", err)
	}
	writeJSON(w, http.StatusOK, revisionViewOf(rev, true))
	return nil
}

// present reports whether a JSON field was sent with a value.
func present(raw json.RawMessage) bool {
	return len(raw) > 0 && !bytes.Equal(bytes.TrimSpace(raw), []byte("null"))
}

// assetResolver looks the assets a timeline names up among the tenant's,
// once each; a database failure is kept for the caller.
type assetResolver struct {
	ctx      context.Context
	s        *Server
	tenantID uuid.UUID
	seen     map[uuid.UUID]timeline.Media
	err      error
}

func (s *Server) assetResolver(ctx context.Context, tenantID uuid.UUID) *assetResolver {
	return &assetResolver{ctx: ctx, s: s, tenantID: tenantID, seen: map[uuid.UUID]timeline.Media{}}
}

func (a *assetResolver) lookup(id uuid.UUID) (timeline.Media, bool) {
	if m, ok := a.seen[id]; ok {
		return m, true
	}
	if a.err != nil {
		return timeline.Media{}, false
	}
	got, err := asset.OfTenant(a.ctx, a.s.pool, a.tenantID, id)
	if errors.Is(err, asset.ErrNotFound) {
		return timeline.Media{}, false
	}
	if err != nil {
		a.err = err
		return timeline.Media{}, false
	}
	m := timeline.Media{Ready: got.Status == asset.Ready, HeldByReview: got.Review, HasVideo: got.VideoCodec != "", HasAudio: got.AudioCodec != ""}
	if got.DurationMS != nil {
		m.Duration = time.Duration(*got.DurationMS) * time.Millisecond
	}
	a.seen[id] = m
	return m, true
}
