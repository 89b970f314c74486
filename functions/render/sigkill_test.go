package render_test

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/functions/render"
	"github.com/aivedio/pipeline/functions/stage/stagetest"
	"github.com/aivedio/pipeline/shared/asset"
	"github.com/aivedio/pipeline/shared/billing"
	"github.com/aivedio/pipeline/shared/delivery"
	"github.com/aivedio/pipeline/shared/outbox"
	renders "github.com/aivedio/pipeline/shared/render"
	"github.com/aivedio/pipeline/shared/servicetest"
)

// renderProcess is the render function as Knative runs it: the function
// binary with STAGE=render, in a process group of its own (its ffmpeg
// children die with it, as they do with their pod).
type renderProcess struct {
	url string
	cmd *exec.Cmd
}

func startRenderProcess(t *testing.T, bin string, f *fixture) *renderProcess {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), "STAGE=render", "LISTEN_ADDRESS="+addr, "DATABASE_URL="+f.url, "DATABASE_MAX_CONNS=4",
		"REDIS_URL="+servicetest.Env(t, "Redis", "REDIS_URL"), "S3_BUCKET="+stagetest.Bucket,
		"PROVIDER_BASE_URL=http://127.0.0.1:9", "RENDER_LEASE=10s", "LOG_FORMAT=json")
	cmd.Stdout, cmd.Stderr = t.Output(), t.Output()
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	require.NoError(t, cmd.Start())
	p := &renderProcess{url: "http://" + addr, cmd: cmd}
	t.Cleanup(p.kill)
	require.Eventually(t, func() bool {
		resp, err := http.Get(p.url + "/health/readiness")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, 30*time.Second, 50*time.Millisecond, "the render function did not become ready")
	return p
}

// kill SIGKILLs the function and every child it started.
func (p *renderProcess) kill() {
	if p.cmd.Process == nil || p.cmd.ProcessState != nil {
		return
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	_ = p.cmd.Wait()
}

// ffmpegWriting reports whether an ffmpeg of process group pgid has an
// output file (.mkv, a chunk) open with something written to it: the kill
// then lands mid-render, not before ffmpeg started or while it is still
// opening its inputs.
func ffmpegWriting(pgid int) bool {
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, stat := range stats {
		b, err := os.ReadFile(stat)
		if err != nil {
			continue // the process ended meanwhile
		}
		// pid (comm) state ppid pgrp ...: comm may hold spaces, so split
		// after its closing parenthesis.
		open, end := bytes.IndexByte(b, '('), bytes.LastIndexByte(b, ')')
		if open < 0 || end < open {
			continue
		}
		fields := strings.Fields(string(b[end+1:]))
		if string(b[open+1:end]) != "ffmpeg" || len(fields) < 3 || fields[2] != strconv.Itoa(pgid) {
			continue
		}
		fds := filepath.Join(filepath.Dir(stat), "fd")
		entries, _ := os.ReadDir(fds)
		for _, e := range entries {
			fd := filepath.Join(fds, e.Name())
			if target, err := os.Readlink(fd); err != nil || !strings.HasSuffix(target, ".mkv") {
				continue
			}
			if fi, err := os.Stat(fd); err == nil && fi.Size() > 0 {
				return true
			}
		}
	}
	return false
}

// deliver posts one stored event to the process over HTTP, as the source
// adapter does.
func (p *renderProcess) deliver(ctx context.Context, ev outbox.Stored) error {
	ce, err := ev.Envelope.ToCloudEvent()
	if err != nil {
		return err
	}
	return delivery.NewHTTP(p.url, 1, time.Minute).Deliver(ctx, ce)
}

// TestSIGKILLMidChunkLeavesOneOutputAndOneCapture: the render function
// killed while its ffmpeg renders a chunk stores nothing; the broker's
// redelivery, once the dead claim ran out, renders the chunk in a new
// process, and the render ends with one output and one capture.
func TestSIGKILLMidChunkLeavesOneOutputAndOneCapture(t *testing.T) {
	t.Parallel()
	bin := filepath.Join(t.TempDir(), "function")
	out, err := exec.Command("go", "build", "-o", bin, "github.com/aivedio/pipeline/functions/cmd/function").CombinedOutput()
	require.NoError(t, err, "go build: %s", out)
	f := newFixture(t, render.Params{ChunkLength: 10 * time.Second})
	j := f.request(t, "1080p30-h264")
	for _, ev := range f.pending(t) {
		require.NoError(t, f.deliver(t.Context(), t, ev)) // start: one chunk
	}
	chunkEvents := f.pending(t)
	require.Len(t, chunkEvents, 1)

	first := startRenderProcess(t, bin, f)
	delivered := make(chan error, 1)
	go func() { delivered <- first.deliver(t.Context(), chunkEvents[0]) }()
	require.Eventually(t, func() bool {
		c, err := renders.GetChunk(t.Context(), f.pool, j.TenantID, j.Key, 0)
		return err == nil && c.Status == renders.ChunkRendering
	}, 30*time.Second, 10*time.Millisecond)
	require.Eventually(t, func() bool { return ffmpegWriting(first.cmd.Process.Pid) }, 30*time.Second, 10*time.Millisecond,
		"the chunk's ffmpeg did not start writing its output")
	first.kill()
	require.Error(t, <-delivered, "the killed delivery is not answered: the adapter delivers it again")
	require.Empty(t, f.objects(t, j), "nothing stored by the killed delivery")

	second := startRenderProcess(t, bin, f)
	require.Eventually(t, func() bool {
		c, err := renders.GetChunk(t.Context(), f.pool, j.TenantID, j.Key, 0)
		return err == nil && c.LeaseUntil != nil && c.LeaseUntil.Before(time.Now())
	}, 30*time.Second, 100*time.Millisecond, "the dead claim runs out")
	require.NoError(t, second.deliver(t.Context(), chunkEvents[0]), "the redelivery claims the chunk and renders it")
	for range 10 {
		evs := f.pending(t)
		if len(evs) == 0 {
			break
		}
		for _, ev := range evs {
			if ev.Envelope.EventType == "billing.settle.requested" {
				require.NoError(t, f.deliver(t.Context(), t, ev))
				continue
			}
			require.NoError(t, second.deliver(t.Context(), ev), "deliver %s", ev.Envelope.EventType)
		}
	}
	got, err := renders.Get(t.Context(), f.pool, j.ID)
	require.NoError(t, err)
	require.Equal(t, renders.Succeeded, got.Status, "%s %s", got.ErrorCode, got.ErrorMessage)
	output, err := asset.Get(t.Context(), f.pool, *got.OutputAssetID)
	require.NoError(t, err)
	stagetest.RemoveAfter(t, f.store, output.ObjectKey)
	require.Equal(t, []string{output.ObjectKey}, f.objects(t, j), "one output, no chunk left behind")
	var outputs, captures int
	require.NoError(t, f.pool.QueryRow(t.Context(), `SELECT count(*) FROM assets WHERE kind = 'RENDER'`).Scan(&outputs))
	require.NoError(t, f.pool.QueryRow(t.Context(), `SELECT count(*) FROM credit_ledger WHERE ledger_business_type = 'CAPTURE'`).Scan(&captures))
	require.Equal(t, 1, outputs)
	require.Equal(t, 1, captures)
	require.Equal(t, billing.Captured, f.reservation(t, j))
	c, err := renders.Chunks(t.Context(), f.pool, j.TenantID, j.Key)
	require.NoError(t, err)
	require.Empty(t, c)
}
