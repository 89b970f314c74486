package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"math"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/aivedio/pipeline/shared/catalog"
	"github.com/aivedio/pipeline/shared/config"
	"github.com/aivedio/pipeline/shared/media"
)

// renderTerminal are the render states nothing moves on from.
var renderTerminal = []string{"SUCCEEDED", "FAILED", "CANCELED"}

// heldChunkAsks are the event ids of chunk asks the render stage
// acknowledged without an inbox row by design: another delivery held the
// chunk's claim (a second ask of the reconciler's, a sibling render of the
// same content) or its own claim ran out while it was paused, and the
// chunk was rendered and recorded under the ask that held the claim. An
// ask is excused only when its render SUCCEEDED and another ask of the
// same chunk of the same content has its row in the render group's inbox:
// an ask the broker lost, which nobody received, is not.
func (w *world) heldChunkAsks(ctx context.Context) (map[string]bool, error) {
	rows, err := w.pool.Query(ctx, `WITH asks AS (
			SELECT o.event_id, j.render_key, o.payload->>'chunk' AS chunk, j.status
			FROM outbox_events o JOIN render_jobs j ON j.render_job_id::text = o.aggregate_id
			WHERE o.event_type = 'render.export.requested' AND o.payload->>'step' = 'chunk')
		SELECT a.event_id::text FROM asks a
		WHERE a.status = 'SUCCEEDED'
		  AND NOT EXISTS (SELECT 1 FROM inbox_dedup i WHERE i.consumer_name = $1 AND i.event_id = a.event_id)
		  AND EXISTS (SELECT 1 FROM asks b JOIN inbox_dedup i ON i.consumer_name = $1 AND i.event_id = b.event_id
			WHERE b.render_key = a.render_key AND b.chunk IS NOT DISTINCT FROM a.chunk AND b.event_id <> a.event_id)`,
		catalog.GroupRender.Name)
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	var id string
	_, err = pgx.ForEachRow(rows, []any{&id}, func() error { out[id] = true; return nil })
	return out, err
}

func heldChunkNote(n int) string {
	return fmt.Sprintf("%d chunk asks of SUCCEEDED renders acknowledged while another delivery held the chunk", n)
}

// renderRow is one render as the checks read it: its output asset and
// its reservation with the CAPTURE rows that name it.
type renderRow struct {
	id, tenant, key, status, profile, code, message string
	reused                                          bool
	durationUS                                      int64
	asset, assetKind, assetTenant, objectKey        *string
	sum                                             []byte
	size                                            *int64
	reservation                                     *string
	captures                                        int
}

// checkRenders is every render invariant: each render requested exists
// and ended SUCCEEDED (or CANCELED); its output is a RENDER asset whose
// object holds what the row records and probes as the profile and the
// timeline say; its reservation was settled by the product rule; and no
// chunk row of rendered content is left.
func (w *world) checkRenders(ctx context.Context, r *report) error {
	ids := w.renderIDs()
	r.add("every render accepted", len(ids) == w.o.Renders, "%d of %d requested through the API", len(ids), w.o.Renders)
	rows, err := w.pool.Query(ctx, `SELECT j.render_job_id::text, j.tenant_id::text, j.render_key, j.status, j.profile,
			coalesce(j.error_code, ''), coalesce(j.error_message, ''), j.reused, j.duration_us,
			a.asset_id::text, a.kind, a.tenant_id::text, a.object_key, a.checksum_sha256, a.size_bytes,
			c.status, (SELECT count(*) FROM credit_ledger l WHERE l.ledger_business_type = 'CAPTURE' AND l.business_id = c.reservation_id::text)
		FROM render_jobs j LEFT JOIN assets a ON a.asset_id = j.output_asset_id
			LEFT JOIN credit_reservations c ON c.render_job_id = j.render_job_id
		ORDER BY j.created_at`)
	if err != nil {
		return err
	}
	jobs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (renderRow, error) {
		var j renderRow
		err := row.Scan(&j.id, &j.tenant, &j.key, &j.status, &j.profile, &j.code, &j.message, &j.reused, &j.durationUS,
			&j.asset, &j.assetKind, &j.assetTenant, &j.objectKey, &j.sum, &j.size, &j.reservation, &j.captures)
		return j, err
	})
	if err != nil {
		return err
	}
	w.checkRenderStates(r, ids, jobs)
	if err := w.checkRenderOutputs(ctx, r, jobs); err != nil {
		return err
	}
	checkRenderBilling(r, jobs)
	return w.checkRenderChunks(ctx, r)
}

func (w *world) checkRenderStates(r *report, ids []string, jobs []renderRow) {
	var problems []string
	found := map[string]bool{}
	for _, j := range jobs {
		found[j.id] = true
		r.Renders[j.status]++
		if j.status == "SUCCEEDED" && j.reused {
			r.Reused++
		}
		switch {
		case !slices.Contains(renderTerminal, j.status):
			problems = append(problems, fmt.Sprintf("render %s still %s", j.id, j.status))
		case j.status == "FAILED":
			problems = append(problems, fmt.Sprintf("render %s FAILED %s: %s", j.id, j.code, j.message))
		}
	}
	for _, id := range ids {
		if !found[id] {
			problems = append(problems, fmt.Sprintf("render %s accepted but not in render_jobs", id))
		}
	}
	r.add("every render terminal, none FAILED", len(problems) == 0, "%v; %d reused%s", r.Renders, r.Reused, firstOf(problems))
}

// checkRenderOutputs reads each SUCCEEDED render's output back from S3,
// hashes it against its asset row and probes it: H.264 and AAC, the
// profile's size, the timeline's duration within a frame (the AAC
// encoder's priming may add up to a frame of sound).
func (w *world) checkRenderOutputs(ctx context.Context, r *report, jobs []renderRow) error {
	dir, err := os.MkdirTemp("", "chaos-render-check-*")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	tool := media.New(config.Media{FFmpegPath: envOr("FFMPEG_PATH", "ffmpeg"), FFprobePath: envOr("FFPROBE_PATH", "ffprobe")})
	var problems []string
	read := map[string]bool{} // identical renders share one output
	succeeded := 0
	for _, j := range jobs {
		if j.status != "SUCCEEDED" {
			continue
		}
		succeeded++
		switch {
		case j.asset == nil:
			problems = append(problems, fmt.Sprintf("render %s SUCCEEDED without an output asset", j.id))
			continue
		case *j.assetKind != "RENDER" || *j.assetTenant != j.tenant:
			problems = append(problems, fmt.Sprintf("render %s: output %s is a %s asset of tenant %s", j.id, *j.asset, *j.assetKind, *j.assetTenant))
			continue
		case read[*j.asset]:
			continue
		}
		read[*j.asset] = true
		if p := w.checkRenderOutput(ctx, tool, filepath.Join(dir, *j.asset+".mp4"), j); p != "" {
			problems = append(problems, p)
		}
	}
	r.add("each render's output read back with its checksum and probed", len(problems) == 0,
		"%d outputs of %d successes read, hashed and probed%s", len(read), succeeded, firstOf(problems))
	return nil
}

// checkRenderOutput checks one output, downloaded to file; "" when it is
// what the render promised.
func (w *world) checkRenderOutput(ctx context.Context, tool *media.Tool, file string, j renderRow) string {
	body, _, err := w.blob.Open(ctx, *j.objectKey)
	if err != nil {
		return fmt.Sprintf("render %s output %s: %v", j.id, *j.objectKey, err)
	}
	f, err := os.Create(file)
	if err != nil {
		_ = body.Close()
		return err.Error()
	}
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(f, h), body)
	_ = body.Close()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	switch {
	case err != nil:
		return fmt.Sprintf("render %s output: read: %v", j.id, err)
	case n != *j.size || hex.EncodeToString(h.Sum(nil)) != hex.EncodeToString(j.sum):
		return fmt.Sprintf("render %s: the store holds %d bytes sha256 %x, the asset records %d bytes sha256 %x", j.id, n, h.Sum(nil), *j.size, j.sum)
	}
	p, err := tool.Probe(ctx, file)
	if err != nil {
		return fmt.Sprintf("render %s output: ffprobe: %v", j.id, err)
	}
	want := media.Profiles[j.profile]
	frame := time.Second / time.Duration(max(want.FPS, 1))
	if got, timeline := p.Duration, time.Duration(j.durationUS)*time.Microsecond; math.Abs(float64(got-timeline)) > float64(frame+25*time.Millisecond) {
		return fmt.Sprintf("render %s lasts %s, its timeline %s", j.id, got, timeline)
	}
	if p.Video == nil || p.Audio == nil || p.Video.Codec != "h264" || p.Audio.Codec != "aac" || p.Video.Width != want.Width || p.Video.Height != want.Height {
		return fmt.Sprintf("render %s is not %dx%d h264/aac: %+v %+v", j.id, want.Width, want.Height, p.Video, p.Audio)
	}
	return ""
}

// checkRenderBilling holds each render to the product rule: a render that
// rendered its output is charged (its reservation CAPTURED, with one
// CAPTURE ledger row keyed by the reservation); one that reused a stored
// output, failed or was canceled is not (RELEASED, no capture). Content is
// rendered, and charged, once per tenant: at most one SUCCEEDED render of
// a render key did not reuse.
func checkRenderBilling(r *report, jobs []renderRow) {
	var problems []string
	charged := map[string]int{}
	for _, j := range jobs {
		if !slices.Contains(renderTerminal, j.status) {
			continue // already a broken invariant
		}
		res := "none"
		if j.reservation != nil {
			res = *j.reservation
		}
		rendered := j.status == "SUCCEEDED" && !j.reused
		if rendered {
			charged[j.tenant+"/"+j.key]++
		}
		if (rendered && (res != "CAPTURED" || j.captures != 1)) || (!rendered && (res != "RELEASED" || j.captures != 0)) {
			problems = append(problems, fmt.Sprintf("render %s %s (reused %t): reservation %s with %d captures", j.id, j.status, j.reused, res, j.captures))
		}
	}
	for content, n := range charged {
		if n > 1 {
			problems = append(problems, fmt.Sprintf("content %s rendered and charged by %d renders", content, n))
		}
	}
	r.add("one capture per render that rendered, none per reuse or failure", len(problems) == 0,
		"%d renders settled, %d contents rendered%s", len(jobs), len(charged), firstOf(problems))
}

// checkRenderChunks: the join that ends a render drops its content's
// chunk rows in the transaction that records the output, so no rendered
// content keeps any. Their objects are removed after that commit, best
// effort (a kill or an S3 restart in between leaves one for the bucket's
// clean-up): those are counted, not held against the run.
func (w *world) checkRenderChunks(ctx context.Context, r *report) error {
	var left, kept int
	err := w.pool.QueryRow(ctx, `SELECT
			count(*) FILTER (WHERE EXISTS (SELECT 1 FROM render_jobs j
				WHERE j.tenant_id = c.tenant_id AND j.render_key = c.render_key AND j.status = 'SUCCEEDED')),
			count(*)
		FROM render_chunks c`).Scan(&left, &kept)
	if err != nil {
		return err
	}
	rows, err := w.pool.Query(ctx, `SELECT object_key FROM render_chunks WHERE object_key IS NOT NULL`)
	if err != nil {
		return err
	}
	recorded, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return err
	}
	keys, err := w.blob.List(ctx, "tenants/")
	if err != nil {
		return fmt.Errorf("list the bucket: %w", err)
	}
	stray := 0
	for _, k := range keys {
		if strings.Contains(k, "/renders/") && strings.HasPrefix(path.Base(k), "chunk-") && !slices.Contains(recorded, k) {
			stray++
		}
	}
	r.add("no chunk row left of rendered content", left == 0,
		"%d chunk rows of rendered content, %d rows in all; %d chunk objects no row records (removed best effort after the join's commit)",
		left, kept, stray)
	return nil
}
