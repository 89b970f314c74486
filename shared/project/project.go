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

// MaxRevisions is how many revisions a project holds at most.
const MaxRevisions = 1000

// ErrTooManyRevisions: the project holds its most revisions already.
var ErrTooManyRevisions = errors.New("the project holds the most revisions it may")

// AddRevision records spec, lowered from source in format, as a revision of
// p, or finds the revision of p with the same spec (created false). A
// project holds at most maxRevisions (ErrTooManyRevisions past it; the
// same spec again is still found): the project's row is locked while the
// revisions are counted, so concurrent posts cannot pass the cap together.
func AddRevision(ctx context.Context, db pg.DB, p Project, format string, source json.RawMessage, spec timeline.Spec, maxRevisions int) (r Revision, created bool, err error) {
	raw, err := json.Marshal(spec)
	if err != nil {
		return Revision{}, false, fmt.Errorf("encode spec: %w", err)
	}
	var got uuid.UUID
	err = pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, `SELECT project_id FROM projects WHERE project_id = $1 FOR UPDATE`, p.ID).Scan(&got); err != nil {
			return fmt.Errorf("lock project %s: %w", p.ID, err)
		}
		err := tx.QueryRow(ctx, `SELECT revision_id FROM project_revisions WHERE project_id = $1 AND content_sha256 = $2`, p.ID, spec.Hash()).Scan(&got)
		if err == nil {
			return nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("look for revision of project %s: %w", p.ID, err)
		}
		var n int
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM project_revisions WHERE project_id = $1`, p.ID).Scan(&n); err != nil {
			return fmt.Errorf("count revisions of project %s: %w", p.ID, err)
		}
		if n >= maxRevisions {
			return fmt.Errorf("project %s holds %d revisions: %w", p.ID, n, ErrTooManyRevisions)
		}
		got, created = uuid.Must(uuid.NewV7()), true
		if _, err := tx.Exec(ctx, `INSERT INTO project_revisions (revision_id, project_id, tenant_id, content_sha256, format, source, spec, duration_us)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`, got, p.ID, p.TenantID, spec.Hash(), format, []byte(source), raw, spec.DurationUS); err != nil {
			return fmt.Errorf("record revision of project %s: %w", p.ID, err)
		}
		return nil
	})
	if err != nil {
		return Revision{}, false, err
	}
	r, err = GetRevision(ctx, db, p.TenantID, got)
	return r, created, err
}

// Summary is a revision without its source and spec, as a listing shows it.
type Summary struct {
	ID         uuid.UUID
	Format     string
	DurationUS int64
	CreatedAt  time.Time
}

// ErrBadCursor: a cursor a listing did not return.
var ErrBadCursor = errors.New("cursor is not one a listing returned")

// RevisionPage lists at most limit revisions of p, oldest first, after
// cursor ("" for the first page), and the cursor of the next page ("" at
// the end). Revision ids are time-ordered (UUIDv7), so the cursor is the
// last id of the page and a revision added after a page was read sorts
// after it (up to the clock skew between API instances).
func RevisionPage(ctx context.Context, q pg.Querier, p Project, cursor string, limit int) ([]Summary, string, error) {
	after := uuid.Nil
	if cursor != "" {
		id, err := uuid.Parse(cursor)
		if err != nil || id.Version() != 7 {
			return nil, "", ErrBadCursor
		}
		after = id
	}
	rows, err := q.Query(ctx, `SELECT revision_id, format, duration_us, created_at FROM project_revisions
		WHERE project_id = $1 AND revision_id > $2 ORDER BY revision_id LIMIT $3`, p.ID, after, limit+1)
	if err != nil {
		return nil, "", fmt.Errorf("list revisions of %s: %w", p.ID, err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Summary, error) {
		var s Summary
		err := r.Scan(&s.ID, &s.Format, &s.DurationUS, &s.CreatedAt)
		s.CreatedAt = s.CreatedAt.UTC()
		return s, err
	})
	if err != nil {
		return nil, "", fmt.Errorf("list revisions of %s: %w", p.ID, err)
	}
	next := ""
	if len(out) > limit {
		out = out[:limit]
		next = out[limit-1].ID.String()
	}
	return out, next, nil
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
