// Package project owns projects and their timeline revisions. A revision
// is immutable: it is inserted once with what the client posted and the
// render spec it lowered to, and the spec's hash makes posting the same
// timeline again find the same revision.
package project

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/aivedio/pipeline/shared/pg"
	"github.com/aivedio/pipeline/shared/timeline"
)

// ErrNotFound: no such project or revision for the tenant.
var ErrNotFound = errors.New("not found")

// Project is one projects row.
type Project struct {
	ID        uuid.UUID
	TenantID  uuid.UUID
	Name      string
	CreatedAt time.Time
}

// Revision is one project_revisions row.
type Revision struct {
	ID        uuid.UUID
	ProjectID uuid.UUID
	TenantID  uuid.UUID
	Format    string // "timeline" or "otio"
	Source    json.RawMessage
	Spec      timeline.Spec
	CreatedAt time.Time
}

// Formats of a revision's source.
const (
	FormatTimeline = "timeline"
	FormatOTIO     = "otio"
)

// Create makes a project of tenantID.
func Create(ctx context.Context, q pg.Querier, tenantID uuid.UUID, name string) (Project, error) {
	p := Project{ID: uuid.Must(uuid.NewV7()), TenantID: tenantID, Name: name}
	if err := q.QueryRow(ctx, `INSERT INTO projects (project_id, tenant_id, name) VALUES ($1, $2, $3) RETURNING created_at`,
		p.ID, tenantID, name).Scan(&p.CreatedAt); err != nil {
		return Project{}, fmt.Errorf("create project: %w", err)
	}
	p.CreatedAt = p.CreatedAt.UTC()
	return p, nil
}

// Get reads a project of tenantID; another tenant's reads as missing.
func Get(ctx context.Context, q pg.Querier, tenantID, id uuid.UUID) (Project, error) {
	p := Project{ID: id, TenantID: tenantID}
	err := q.QueryRow(ctx, `SELECT name, created_at FROM projects WHERE project_id = $1 AND tenant_id = $2`, id, tenantID).Scan(&p.Name, &p.CreatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return Project{}, fmt.Errorf("project %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return Project{}, fmt.Errorf("read project %s: %w", id, err)
	}
	p.CreatedAt = p.CreatedAt.UTC()
	return p, nil
}

// AddRevision records spec, lowered from source in format, as a revision of
// p, or finds the revision of p with the same spec (created false).
func AddRevision(ctx context.Context, q pg.Querier, p Project, format string, source json.RawMessage, spec timeline.Spec) (r Revision, created bool, err error) {
	raw, err := json.Marshal(spec)
	if err != nil {
		return Revision{}, false, fmt.Errorf("encode spec: %w", err)
	}
	id := uuid.Must(uuid.NewV7())
	var got uuid.UUID
	err = q.QueryRow(ctx, `INSERT INTO project_revisions (revision_id, project_id, tenant_id, content_sha256, format, source, spec, duration_us)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT (project_id, content_sha256) DO NOTHING RETURNING revision_id`,
		id, p.ID, p.TenantID, spec.Hash(), format, []byte(source), raw, spec.DurationUS).Scan(&got)
	created = err == nil
	if errors.Is(err, pgx.ErrNoRows) {
		err = q.QueryRow(ctx, `SELECT revision_id FROM project_revisions WHERE project_id = $1 AND content_sha256 = $2`, p.ID, spec.Hash()).Scan(&got)
	}
	if err != nil {
		return Revision{}, false, fmt.Errorf("record revision of project %s: %w", p.ID, err)
	}
	r, err = GetRevision(ctx, q, p.TenantID, got)
	return r, created, err
}

// GetRevision reads a revision of tenantID; another tenant's reads as
// missing.
func GetRevision(ctx context.Context, q pg.Querier, tenantID, id uuid.UUID) (Revision, error) {
	r := Revision{ID: id, TenantID: tenantID}
	var spec []byte
	err := q.QueryRow(ctx, `SELECT project_id, format, source, spec, created_at FROM project_revisions WHERE revision_id = $1 AND tenant_id = $2`,
		id, tenantID).Scan(&r.ProjectID, &r.Format, &r.Source, &spec, &r.CreatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return Revision{}, fmt.Errorf("revision %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return Revision{}, fmt.Errorf("read revision %s: %w", id, err)
	}
	if err := json.Unmarshal(spec, &r.Spec); err != nil {
		return Revision{}, fmt.Errorf("decode spec of revision %s: %w", id, err)
	}
	r.CreatedAt = r.CreatedAt.UTC()
	return r, nil
}

// Revisions lists the revisions of p, oldest first.
func Revisions(ctx context.Context, q pg.Querier, p Project) ([]Revision, error) {
	rows, err := q.Query(ctx, `SELECT revision_id FROM project_revisions WHERE project_id = $1 ORDER BY created_at, revision_id`, p.ID)
	if err != nil {
		return nil, fmt.Errorf("list revisions of %s: %w", p.ID, err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	if err != nil {
		return nil, err
	}
	out := make([]Revision, 0, len(ids))
	for _, id := range ids {
		r, err := GetRevision(ctx, q, p.TenantID, id)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}
