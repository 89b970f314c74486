package render_test

import (
	"fmt"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/functions/render"
	"github.com/aivedio/pipeline/shared/asset"
	"github.com/aivedio/pipeline/shared/media"
	"github.com/aivedio/pipeline/shared/project"
	renders "github.com/aivedio/pipeline/shared/render"
	"github.com/aivedio/pipeline/shared/timeline"
)

// benchProfile is the profile the benchmark renders in.
const benchProfile = "720p30-h264"

// BenchmarkRender renders a 26.5 s timeline of three clips with a
// dissolve and a title: once by plain ffmpeg (the whole timeline in one
// ffmpeg run with the same filter graph, then the one-part join that
// encodes the sound, reading the same presigned URLs), and through the
// render stage (start, chunks, join, with PostgreSQL, S3 and the chunk
// checks) delivering chunks one at a time and two at a time. Each prints
// wall and CPU seconds (this process and its ffmpeg/ffprobe children) per
// output second; `make bench` prints the ratios.
func BenchmarkRender(b *testing.B) {
	f := fixtureOf(b, render.Params{ChunkLength: renders.DefaultChunk}, 10*time.Second)
	seconds := float64(f.revision.Spec.DurationUS) / 1e6
	inputs := map[uuid.UUID]media.RenderInput{}
	for _, id := range f.revision.Spec.Assets() {
		a, err := asset.Get(b.Context(), f.pool, id)
		require.NoError(b, err)
		url, err := f.store.PresignGet(b.Context(), a.ObjectKey, time.Hour)
		require.NoError(b, err)
		inputs[id] = media.RenderInput{URL: url, HasAudio: true}
	}
	onePass := func(b *testing.B, spec timeline.Spec) {
		m := startMeasure(b)
		for b.Loop() {
			dir := b.TempDir()
			part, out := filepath.Join(dir, "whole.mkv"), filepath.Join(dir, "out.mp4")
			require.NoError(b, f.tool.RenderChunk(b.Context(), media.Chunk{Spec: spec, Inputs: inputs,
				Profile: media.Profiles[benchProfile], FromUS: 0, ToUS: spec.DurationUS, Output: part}))
			require.NoError(b, f.tool.Join(b.Context(), []string{part}, out))
		}
		m.report(b, seconds)
	}
	b.Run("plain-ffmpeg-one-pass", func(b *testing.B) { onePass(b, f.revision.Spec) })
	// A hostile title (drawtext's expression syntax, which ffmpeg would
	// evaluate forever were it not drawn as text) costs what a plain one
	// does: side by side with the plain run above.
	b.Run("hostile-title-one-pass", func(b *testing.B) {
		onePass(b, f.retitled(b, "%{e:while(1,1)}").Spec)
	})
	for _, workers := range []int{1, 2} {
		b.Run(fmt.Sprintf("pipeline-chunked/workers=%d", workers), func(b *testing.B) {
			m := startMeasure(b)
			for b.Loop() {
				// New content each round: an identical render would reuse
				// the output without ffmpeg.
				f.revision = f.retitled(b, uuid.NewString()[:8])
				j := f.request(b, benchProfile)
				f.drainWith(b, workers)
				got, err := renders.Get(b.Context(), f.pool, j.ID)
				require.NoError(b, err)
				require.Equal(b, renders.Succeeded, got.Status, "%s %s", got.ErrorCode, got.ErrorMessage)
				out, err := asset.Get(b.Context(), f.pool, *got.OutputAssetID)
				require.NoError(b, err)
				require.NoError(b, f.store.Delete(b.Context(), out.ObjectKey))
			}
			m.report(b, seconds)
		})
	}
}

// retitled records a revision of the fixture's timeline with another
// title text.
func (f *fixture) retitled(tb testing.TB, text string) project.Revision {
	tb.Helper()
	spec := f.revision.Spec
	spec.Titles = append([]timeline.Title(nil), spec.Titles...)
	spec.Titles[0].Text = text
	pr, err := project.Get(tb.Context(), f.pool, f.tenantID, f.revision.ProjectID)
	require.NoError(tb, err)
	rev, _, err := project.AddRevision(tb.Context(), f.pool, pr, project.FormatTimeline, f.revision.Source, spec, project.MaxRevisions)
	require.NoError(tb, err)
	return rev
}

// drainWith delivers pending events with workers at once until none is
// left, as that many render pods would.
func (f *fixture) drainWith(tb testing.TB, workers int) {
	tb.Helper()
	for range 50 {
		evs := f.pending(tb)
		if len(evs) == 0 {
			return
		}
		var wg sync.WaitGroup
		errs := make(chan error, len(evs))
		sem := make(chan struct{}, workers)
		for _, ev := range evs {
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				errs <- f.deliver(tb.Context(), tb, ev)
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(tb, err)
		}
	}
	tb.Fatal("the render did not stop emitting events")
}

// measure is the wall clock and CPU at the start of a benchmark.
type measure struct {
	start       time.Time
	self, media time.Duration
	byOp        map[string]float64
}

func startMeasure(tb testing.TB) measure {
	return measure{start: time.Now(), self: selfCPU(), media: media.CPUTotals().Total(), byOp: mediaCPU(tb)}
}

func (m measure) report(b *testing.B, outputSeconds float64) {
	n := float64(b.N) * outputSeconds
	b.ReportMetric(time.Since(m.start).Seconds()/n, "wall-s/out-s")
	b.ReportMetric((selfCPU()-m.self).Seconds()/n, "go-cpu-s/out-s")
	b.ReportMetric((media.CPUTotals().Total()-m.media).Seconds()/n, "ffmpeg-cpu-s/out-s")
	now := mediaCPU(b)
	for _, op := range []string{"render", "join", media.OpProbe} {
		b.ReportMetric((now[op]-m.byOp[op])/n, op+"-cpu-s/out-s")
	}
}

// mediaCPU is the CPU seconds this process's ffmpeg and ffprobe children
// spent so far, by operation.
func mediaCPU(tb testing.TB) map[string]float64 {
	tb.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(media.Collectors()...)
	families, err := reg.Gather()
	require.NoError(tb, err)
	out := map[string]float64{}
	for _, mf := range families {
		if mf.GetName() != "aivedio_media_cpu_seconds_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "operation" {
					out[l.GetValue()] += m.GetCounter().GetValue()
				}
			}
		}
	}
	return out
}

func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
