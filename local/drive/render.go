package drive

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/aivedio/pipeline/shared/config"
	"github.com/aivedio/pipeline/shared/media"
)

// RenderParams say what to render: N renders of one timeline made of
// generated outputs (Clips, at least one) and a local file uploaded
// through the Asset API (Upload).
type RenderParams struct {
	APIURL  string
	Key     string
	Clips   []uuid.UUID // outputs of SUCCEEDED generations
	Upload  string      // a local video file with sound
	N       int
	Timeout time.Duration
	Client  *http.Client
	Pool    *pgxpool.Pool // to check the reservations
}

// RenderProfiles are the profiles renders cycle through: past the third,
// a render repeats an earlier one's content and reuses its output.
var RenderProfiles = []string{"1080p30-h264", "720p30-h264", "1080x1920-vertical"}

// Rendered is one finished render as the API and ffprobe saw it.
type Rendered struct {
	ID       uuid.UUID
	Profile  string
	Status   string
	Reused   bool
	URL      string
	Duration time.Duration
	Width    int
	Height   int
	Video    string
	Audio    string
	Error    string
}

// RenderResult is what a render run saw, and the invariants it broke.
type RenderResult struct {
	UploadID        uuid.UUID
	RevisionID      uuid.UUID
	DurationSeconds float64
	Renders         []Rendered
	Violations      []string
	Elapsed         time.Duration
}

// Renders uploads p.Upload, builds a timeline of the clips and the upload
// with a dissolve and a title, renders it p.N times, and checks each
// output: SUCCEEDED, the timeline's duration within a frame, the
// profile's size, H.264 and AAC, the bytes matching the stored sha256, and
// the reservation captured (released when reused).
func Renders(ctx context.Context, p RenderParams) (RenderResult, error) {
	if p.Client == nil {
		p.Client = &http.Client{Timeout: 60 * time.Second}
	}
	if p.Timeout <= 0 {
		p.Timeout = 10 * time.Minute
	}
	if len(p.Clips) == 0 {
		return RenderResult{}, fmt.Errorf("renders need at least one generated clip; none succeeded")
	}
	ctx, cancel := context.WithTimeout(ctx, p.Timeout)
	defer cancel()
	start := time.Now()
	var res RenderResult
	var err error
	if res.UploadID, err = upload(ctx, p); err != nil {
		return res, err
	}
	var project struct {
		ProjectID uuid.UUID `json:"project_id"`
	}
	if err := p.call(ctx, http.MethodPost, "/v1/projects", "", map[string]any{"name": "demo export"}, &project, http.StatusCreated); err != nil {
		return res, fmt.Errorf("create project: %w", err)
	}
	clips := []map[string]any{{"asset_id": p.Clips[0], "in": 0, "out": 2}}
	clips = append(clips, map[string]any{"asset_id": res.UploadID, "in": 0, "out": 3,
		"transition_in": map[string]any{"type": "dissolve", "duration": 0.5}})
	if len(p.Clips) > 1 {
		clips = append(clips, map[string]any{"asset_id": p.Clips[1], "in": 0, "out": 2,
			"transition_in": map[string]any{"type": "dissolve", "duration": 0.5}})
	}
	timeline := map[string]any{"clips": clips, "titles": []map[string]any{{"text": "AiVedio demo", "start": 0.5, "end": 2.5}}}
	var rev struct {
		RevisionID      uuid.UUID `json:"revision_id"`
		DurationSeconds float64   `json:"duration_seconds"`
	}
	if err := p.call(ctx, http.MethodPost, "/v1/projects/"+project.ProjectID.String()+"/revisions", "",
		map[string]any{"timeline": timeline}, &rev, http.StatusCreated); err != nil {
		return res, fmt.Errorf("post timeline: %w", err)
	}
	res.RevisionID, res.DurationSeconds = rev.RevisionID, rev.DurationSeconds

	ids := make([]uuid.UUID, p.N)
	for i := range p.N {
		profile := RenderProfiles[i%len(RenderProfiles)]
		if i >= len(RenderProfiles) {
			// Repeat a render once it is stored, to see its output reused.
			if _, err := p.waitRender(ctx, ids[i-len(RenderProfiles)]); err != nil {
				return res, err
			}
		}
		var ref struct {
			RenderID uuid.UUID `json:"render_id"`
		}
		if err := p.call(ctx, http.MethodPost, "/v1/renders", uuid.NewString(),
			map[string]any{"project_revision_id": rev.RevisionID, "profile": profile}, &ref, http.StatusAccepted); err != nil {
			return res, fmt.Errorf("request render: %w", err)
		}
		ids[i] = ref.RenderID
	}
	tool := media.New(config.Media{})
	for i, id := range ids {
		view, err := p.waitRender(ctx, id)
		if err != nil {
			return res, err
		}
		r := Rendered{ID: id, Profile: RenderProfiles[i%len(RenderProfiles)], Status: view.Status, Reused: view.Reused}
		if view.Error != nil {
			r.Error = view.Error.Code + ": " + view.Error.Message
		}
		if view.Status != "SUCCEEDED" || view.Output == nil {
			res.Violations = append(res.Violations, fmt.Sprintf("render %s ended %s (%s)", id, view.Status, r.Error))
			res.Renders = append(res.Renders, r)
			continue
		}
		r.URL = view.Output.DownloadURL
		res.Violations = append(res.Violations, p.checkOutput(ctx, tool, &r, view, rev.DurationSeconds)...)
		res.Renders = append(res.Renders, r)
	}
	res.Elapsed = time.Since(start)
	return res, nil
}

type renderView struct {
	Status string `json:"status"`
	Reused bool   `json:"reused"`
	Output *struct {
		AssetID     uuid.UUID `json:"asset_id"`
		DownloadURL string    `json:"download_url"`
		SHA256      string    `json:"sha256"`
	} `json:"output"`
	Error *struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

func (p RenderParams) waitRender(ctx context.Context, id uuid.UUID) (renderView, error) {
	for {
		var v renderView
		if err := p.call(ctx, http.MethodGet, "/v1/renders/"+id.String(), "", nil, &v, http.StatusOK); err != nil {
			return v, fmt.Errorf("get render %s: %w", id, err)
		}
		switch v.Status {
		case "SUCCEEDED", "FAILED", "CANCELED":
			return v, nil
		}
		select {
		case <-ctx.Done():
			return v, fmt.Errorf("render %s still %s: %w", id, v.Status, ctx.Err())
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// checkOutput downloads a render's output and probes it.
func (p RenderParams) checkOutput(ctx context.Context, tool *media.Tool, r *Rendered, v renderView, wantSeconds float64) []string {
	var bad []string
	dir, err := os.MkdirTemp("", "demo-render-*")
	if err != nil {
		return []string{err.Error()}
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "output.mp4")
	sum, err := download(ctx, p.Client, r.URL, path)
	if err != nil {
		return []string{fmt.Sprintf("render %s: download: %v", r.ID, err)}
	}
	if sum != v.Output.SHA256 {
		bad = append(bad, fmt.Sprintf("render %s: downloaded bytes hash to %s, the asset says %s", r.ID, sum, v.Output.SHA256))
	}
	probe, err := tool.Probe(ctx, path)
	if err != nil {
		return append(bad, fmt.Sprintf("render %s: ffprobe: %v", r.ID, err))
	}
	r.Duration = probe.Duration
	if probe.Video != nil {
		r.Width, r.Height, r.Video = probe.Video.Width, probe.Video.Height, probe.Video.Codec
	}
	if probe.Audio != nil {
		r.Audio = probe.Audio.Codec
	}
	want := media.Profiles[r.Profile]
	if math.Abs(probe.Duration.Seconds()-wantSeconds) > 1.0/float64(want.FPS)+0.025 {
		bad = append(bad, fmt.Sprintf("render %s lasts %s, the timeline %.3fs", r.ID, probe.Duration, wantSeconds))
	}
	if r.Width != want.Width || r.Height != want.Height || r.Video != "h264" || r.Audio != "aac" {
		bad = append(bad, fmt.Sprintf("render %s is %dx%d %s/%s, not %dx%d h264/aac", r.ID, r.Width, r.Height, r.Video, r.Audio, want.Width, want.Height))
	}
	if p.Pool != nil {
		wantStatus := map[bool]string{false: "CAPTURED", true: "RELEASED"}[r.Reused]
		if status, err := p.settledReservation(ctx, r.ID); err != nil {
			bad = append(bad, fmt.Sprintf("render %s: reservation: %v", r.ID, err))
		} else if status != wantStatus {
			bad = append(bad, fmt.Sprintf("render %s (reused %t): reservation %s, want %s", r.ID, r.Reused, status, wantStatus))
		}
	}
	return bad
}

// settleWait bounds how long a finished render's reservation may stay HELD:
// the settle stage captures or releases it from the render's terminal
// event, which a broker restart can hold back for its consumers' recovery.
const settleWait = 2 * time.Minute

// settledReservation is the status of render id's reservation once it is
// no longer HELD, or HELD when settleWait passed first.
func (p RenderParams) settledReservation(ctx context.Context, id uuid.UUID) (string, error) {
	deadline := time.Now().Add(settleWait)
	for {
		var status string
		if err := p.Pool.QueryRow(ctx, `SELECT status FROM credit_reservations WHERE render_job_id = $1`, id).Scan(&status); err != nil {
			return "", err
		}
		if status != "HELD" || time.Now().After(deadline) {
			return status, nil
		}
		select {
		case <-ctx.Done():
			return status, nil
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// upload puts a local file through the Asset API and waits until it is
// READY.
func upload(ctx context.Context, p RenderParams) (uuid.UUID, error) {
	data, err := os.ReadFile(p.Upload)
	if err != nil {
		return uuid.Nil, fmt.Errorf("read upload: %w", err)
	}
	sum := sha256.Sum256(data)
	var created struct {
		AssetID uuid.UUID `json:"asset_id"`
		Upload  struct {
			Method  string            `json:"method"`
			URL     string            `json:"url"`
			Headers map[string]string `json:"headers"`
		} `json:"upload"`
	}
	if err := p.call(ctx, http.MethodPost, "/v1/assets", uuid.NewString(), map[string]any{"kind": "VIDEO", "content_type": "video/mp4",
		"size_bytes": len(data), "sha256": hex.EncodeToString(sum[:]), "filename": filepath.Base(p.Upload)}, &created, http.StatusCreated); err != nil {
		return uuid.Nil, fmt.Errorf("announce upload: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, created.Upload.Method, created.Upload.URL, bytes.NewReader(data))
	if err != nil {
		return uuid.Nil, err
	}
	for k, v := range created.Upload.Headers {
		req.Header.Set(k, v)
	}
	req.ContentLength = int64(len(data))
	resp, err := p.Client.Do(req)
	if err != nil {
		return uuid.Nil, fmt.Errorf("upload: %w", err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return uuid.Nil, fmt.Errorf("upload: HTTP %d from object storage", resp.StatusCode)
	}
	var done struct{}
	if err := p.call(ctx, http.MethodPost, "/v1/assets/"+created.AssetID.String()+"/complete", "", nil, &done, http.StatusAccepted); err != nil {
		return uuid.Nil, fmt.Errorf("complete upload: %w", err)
	}
	for {
		var a struct {
			Status string `json:"status"`
			Error  *struct {
				Message string `json:"message"`
			} `json:"error"`
		}
		if err := p.call(ctx, http.MethodGet, "/v1/assets/"+created.AssetID.String(), "", nil, &a, http.StatusOK); err != nil {
			return uuid.Nil, err
		}
		switch a.Status {
		case "READY":
			return created.AssetID, nil
		case "FAILED":
			return uuid.Nil, fmt.Errorf("upload %s FAILED: %s", created.AssetID, a.Error.Message)
		}
		select {
		case <-ctx.Done():
			return uuid.Nil, fmt.Errorf("upload %s still %s: %w", created.AssetID, a.Status, ctx.Err())
		case <-time.After(300 * time.Millisecond):
		}
	}
}

// call sends one API request with a JSON body (nil: none) and decodes
// the answer into out.
func (p RenderParams) call(ctx context.Context, method, path, idempotencyKey string, body, out any, want ...int) error {
	var r io.Reader
	if body != nil {
		data, err := json.Marshal(body)
		if err != nil {
			return err
		}
		r = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(ctx, method, p.APIURL+path, r)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+p.Key)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if idempotencyKey != "" {
		req.Header.Set("Idempotency-Key", idempotencyKey)
	}
	return do(p.Client, req, out, want...)
}

// download saves url to path and returns the sha256 of what it saved.
func download(ctx context.Context, c *http.Client, url, path string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	resp, err := c.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("HTTP %d", resp.StatusCode)
	}
	f, err := os.Create(path)
	if err != nil {
		return "", err
	}
	h := sha256.New()
	_, err = io.Copy(io.MultiWriter(f, h), resp.Body)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return hex.EncodeToString(h.Sum(nil)), err
}

// OutputsOf reads, through the API, the output asset of up to max of the
// tasks that SUCCEEDED, in order.
func OutputsOf(ctx context.Context, p Params, res Result, max int) ([]uuid.UUID, error) {
	if p.Client == nil {
		p.Client = &http.Client{Timeout: 30 * time.Second}
	}
	var out []uuid.UUID
	for _, id := range res.Tasks {
		if len(out) == max {
			break
		}
		if res.Final[id] != "SUCCEEDED" {
			continue
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.APIURL+"/v1/generations/"+id.String(), nil)
		if err != nil {
			return nil, err
		}
		req.Header.Set("Authorization", "Bearer "+p.Key)
		var g struct {
			Outputs []struct {
				AssetID uuid.UUID `json:"asset_id"`
			} `json:"outputs"`
		}
		if err := do(p.Client, req, &g, http.StatusOK); err != nil {
			return nil, fmt.Errorf("get generation %s: %w", id, err)
		}
		if len(g.Outputs) > 0 {
			out = append(out, g.Outputs[0].AssetID)
		}
	}
	return out, nil
}
