package render_test

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/shared/aggregate"
	"github.com/aivedio/pipeline/shared/aggregate/aggregatetest"
	"github.com/aivedio/pipeline/shared/dbtest"
	"github.com/aivedio/pipeline/shared/render"
	"github.com/aivedio/pipeline/shared/task"
	"github.com/aivedio/pipeline/shared/tenant"
)

func TestKindConforms(t *testing.T) {
	t.Parallel()
	pool := dbtest.TestSchema(t)
	ctx := t.Context()
	var created tenant.Created
	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		var err error
		created, err = tenant.Create(ctx, tx, tenant.NewTenant{Name: "acme", Credits: 1000}, tenant.RoleTenant)
		return err
	}))
	tenantID := created.TenantID
	projectID, revisionID := uuid.New(), uuid.New()
	_, err := pool.Exec(ctx, `INSERT INTO projects (project_id, tenant_id, name) VALUES ($1, $2, 'p')`, projectID, tenantID)
	require.NoError(t, err)
	sum := sha256.Sum256([]byte("revision"))
	_, err = pool.Exec(ctx, `INSERT INTO project_revisions (revision_id, project_id, tenant_id, content_sha256, format, source, spec, duration_us)
		VALUES ($1, $2, $3, $4, 'timeline', '{}', '{}', 1000000)`, revisionID, projectID, tenantID, sum[:])
	require.NoError(t, err)
	o := task.Origin{Producer: "test"}

	aggregatetest.Exercise(t, aggregatetest.Harness[uuid.UUID, render.Status, render.Job]{
		Kind: render.Kind,
		Pool: pool,
		Create: func(t *testing.T, s render.Status) uuid.UUID {
			var id uuid.UUID
			require.NoError(t, pgx.BeginFunc(t.Context(), pool, func(tx pgx.Tx) error {
				key := make([]byte, 32)
				_, _ = rand.Read(key)
				j, _, err := render.Create(t.Context(), tx, render.New{TenantID: tenantID, RevisionID: revisionID, SpecID: "spec",
					Profile: "720p", Key: hex.EncodeToString(key), DurationUS: 1_000_000, IdempotencyKey: uuid.NewString(), RequestHash: []byte{1}})
				if err != nil {
					return err
				}
				id = j.ID
				// Put straight into s with what s requires, as no stage
				// would: the suite needs a row in every status.
				out, err := outputAsset(t.Context(), tx, tenantID)
				if err != nil {
					return err
				}
				_, err = tx.Exec(t.Context(), `UPDATE render_jobs SET status = $2,
					output_asset_id = CASE WHEN $2 = 'SUCCEEDED' THEN $3::uuid END,
					error_code = CASE WHEN $2 = 'FAILED' THEN 'test' END WHERE render_job_id = $1`, id, s, out)
				return err
			}))
			return id
		},
		Move: func(ctx context.Context, tx pgx.Tx, cur render.Job, to render.Status) error {
			ch := render.Change{To: to}
			switch to {
			case render.Succeeded:
				out, err := outputAsset(ctx, tx, tenantID)
				if err != nil {
					return err
				}
				ch.OutputAssetID = &out
			case render.Failed:
				ch.ErrorCode, ch.ErrorMessage = "test", "conformance"
			}
			_, err := render.Apply(ctx, tx, o, cur, ch)
			return err
		},
	})
}

// outputAsset records a RENDER asset of tenantID.
func outputAsset(ctx context.Context, tx pgx.Tx, tenantID uuid.UUID) (uuid.UUID, error) {
	var id uuid.UUID
	sum := sha256.Sum256([]byte("output"))
	err := tx.QueryRow(ctx, `INSERT INTO assets (tenant_id, kind, object_key, checksum_sha256, size_bytes, content_type)
		VALUES ($1, 'RENDER', $2, $3, 1, 'video/mp4') RETURNING asset_id`, tenantID, "renders/"+uuid.NewString(), sum[:]).Scan(&id)
	return id, err
}

func TestMoveRefusesAMoveNotInTheTable(t *testing.T) {
	t.Parallel()
	for _, from := range render.Kind.States {
		for _, to := range render.Kind.States {
			if from == to || render.Legal(from, to) {
				continue
			}
			// Refused before the database is touched: no transaction needed.
			_, err := render.Move(t.Context(), nil, render.Job{ID: uuid.New(), Status: from}, render.Change{To: to})
			require.ErrorIs(t, err, aggregate.ErrIllegalMove, "%s -> %s", from, to)
		}
	}
}
