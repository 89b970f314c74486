package project_test

import (
	"encoding/json"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/shared/dbtest"
	"github.com/aivedio/pipeline/shared/project"
	"github.com/aivedio/pipeline/shared/tenant"
	"github.com/aivedio/pipeline/shared/timeline"
)

func TestRevisionsAreFoundByContent(t *testing.T) {
	t.Parallel()
	tx := dbtest.TestTx(t)
	ctx := t.Context()
	c, err := tenant.Create(ctx, tx, tenant.NewTenant{Name: "acme", Credits: 1}, tenant.RoleTenant)
	require.NoError(t, err)
	p, err := project.Create(ctx, tx, c.TenantID, "launch")
	require.NoError(t, err)
	spec := timeline.Spec{Clips: []timeline.Clip{{AssetID: uuid.New(), OutUS: 2e6}}, Transitions: []timeline.Transition{}, Titles: []timeline.Title{}, DurationUS: 2e6}

	r, created, err := project.AddRevision(ctx, tx, p, project.FormatTimeline, json.RawMessage(`{"clips":[]}`), spec, project.MaxRevisions)
	require.NoError(t, err)
	require.True(t, created)
	require.Equal(t, spec, r.Spec)
	again, created, err := project.AddRevision(ctx, tx, p, project.FormatOTIO, json.RawMessage(`{}`), spec, project.MaxRevisions)
	require.NoError(t, err)
	require.False(t, created)
	require.Equal(t, r.ID, again.ID)
	require.Equal(t, project.FormatTimeline, again.Format, "the first post of the content is kept")

	other := spec
	other.DurationUS = 3e6
	third, created, err := project.AddRevision(ctx, tx, p, project.FormatTimeline, json.RawMessage(`{}`), other, project.MaxRevisions)
	require.NoError(t, err)
	require.True(t, created)
	require.NotEqual(t, r.ID, third.ID)
	page, next, err := project.RevisionPage(ctx, tx, p, "", 1)
	require.NoError(t, err)
	require.Len(t, page, 1)
	require.Equal(t, r.ID, page[0].ID, "oldest first")
	rest, end, err := project.RevisionPage(ctx, tx, p, next, 1)
	require.NoError(t, err)
	require.Len(t, rest, 1)
	require.Equal(t, third.ID, rest[0].ID)
	require.Empty(t, end, "no page after the last")
	_, _, err = project.RevisionPage(ctx, tx, p, "not-a-cursor", 1)
	require.ErrorIs(t, err, project.ErrBadCursor)

	_, _, err = project.AddRevision(ctx, tx, p, project.FormatTimeline, json.RawMessage(`{}`), timeline.Spec{Clips: spec.Clips,
		Transitions: spec.Transitions, Titles: spec.Titles, DurationUS: 4e6}, 2)
	require.ErrorIs(t, err, project.ErrTooManyRevisions, "a third revision past a cap of two")
	found, created, err := project.AddRevision(ctx, tx, p, project.FormatTimeline, json.RawMessage(`{}`), other, 2)
	require.NoError(t, err, "a revision already held is found at the cap")
	require.False(t, created)
	require.Equal(t, third.ID, found.ID)

	_, err = project.GetRevision(ctx, tx, uuid.New(), r.ID)
	require.ErrorIs(t, err, project.ErrNotFound, "another tenant's revision reads as missing")
	_, err = project.Get(ctx, tx, uuid.New(), p.ID)
	require.ErrorIs(t, err, project.ErrNotFound)
}
