//go:build !race

package main

import (
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
	"github.com/aivedio/pipeline/local/drive"
	"github.com/aivedio/pipeline/shared/servicetest"
)

// TestProxyRestartMidChunkRender: the render function SIGKILLed while its
// ffmpeg renders a chunk, and the RocketMQ proxy restarted right after,
// before a new render function is up. The render still ends SUCCEEDED,
// with one output and one capture: the chunk event comes back from the
// broker once the proxy answers, waits out the dead claim, and is rendered
// by the new process.
//
// It stops the broker every other test uses, so it is not a TestRealBroker*
// test: `make test` runs it alone (local/services/test.sh).
func TestProxyRestartMidChunkRender(t *testing.T) {
	realServices(t)
	t.Setenv("ROCKETMQ_ENDPOINT", servicetest.Env(t, "RocketMQ", "ROCKETMQ_ENDPOINT"))
	bin := filepath.Join(t.TempDir(), "function")
	out, err := exec.Command("go", "build", "-o", bin, "github.com/aivedio/pipeline/functions/cmd/function").CombinedOutput()
	require.NoError(t, err, "go build: %s", out)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())

	first := startStageProcess(t, bin, render.Name, addr)
	o := defaultOptions()
	o.apiAddr, o.opsAddr = "127.0.0.1:0", "127.0.0.1:0"
	o.logTo = t.Output()
	o.sim.CacheDir = t.TempDir()
	o.remote = map[string]string{render.Name: "http://" + addr}
	ctx, cancel := context.WithTimeout(t.Context(), 8*time.Minute)
	defer cancel()
	env, err := start(ctx, o)
	require.NoError(t, err)
	defer env.close()

	gens, err := drive.Run(ctx, drive.Params{APIURL: env.apiURL, Key: env.devKey, N: 1, Models: env.models, Timeout: 2 * time.Minute})
	require.NoError(t, err)
	clips, err := drive.OutputsOf(ctx, drive.Params{APIURL: env.apiURL, Key: env.devKey}, gens, 1)
	require.NoError(t, err)
	require.Len(t, clips, 1, "the generation to render succeeded")
	upload := filepath.Join(t.TempDir(), "upload.mp4")
	require.NoError(t, makeClip(ctx, upload))

	type result struct {
		res drive.RenderResult
		err error
	}
	done := make(chan result, 1)
	go func() {
		res, err := drive.Renders(ctx, drive.RenderParams{APIURL: env.apiURL, Key: env.devKey, Clips: clips, Upload: upload,
			N: 1, Timeout: 6 * time.Minute, Pool: env.pool})
		done <- result{res, err}
	}()

	require.Eventually(t, func() bool {
		var rendering int
		err := env.pool.QueryRow(ctx, `SELECT count(*) FROM render_chunks WHERE status = 'RENDERING'`).Scan(&rendering)
		return err == nil && rendering > 0 && first.running("ffmpeg")
	}, 3*time.Minute, 10*time.Millisecond, "a chunk is claimed and its ffmpeg runs")
	first.kill()
	restarted := time.Now()
	out, err = exec.Command("services/services.sh", "restart-proxy").CombinedOutput()
	require.NoError(t, err, "restart the proxy: %s", out)
	t.Logf("proxy restarted in %s", time.Since(restarted).Round(100*time.Millisecond))
	startStageProcess(t, bin, render.Name, addr)

	r := <-done
	require.NoError(t, r.err)
	require.Empty(t, r.res.Violations)
	require.Len(t, r.res.Renders, 1)
	require.Equal(t, "SUCCEEDED", r.res.Renders[0].Status, r.res.Renders[0].Error)
	id := r.res.Renders[0].ID
	var outputs, captures, chunks int
	require.NoError(t, env.pool.QueryRow(ctx, `SELECT count(*) FROM assets WHERE kind = 'RENDER'`).Scan(&outputs))
	require.NoError(t, env.pool.QueryRow(ctx, `SELECT count(*) FROM credit_ledger l JOIN credit_reservations r ON l.business_id = r.reservation_id::text
		WHERE l.ledger_business_type = 'CAPTURE' AND r.render_job_id = $1`, id).Scan(&captures))
	require.NoError(t, env.pool.QueryRow(ctx, `SELECT count(*) FROM render_chunks`).Scan(&chunks))
	require.Equal(t, 1, outputs, "one output")
	require.Equal(t, 1, captures, "one capture")
	require.Zero(t, chunks, "no chunk left behind")
}

// stageProcess is one stage function as Knative runs it: the function
// binary in a process group of its own, so its ffmpeg children die with
// it as they do with their pod.
type stageProcess struct {
	cmd *exec.Cmd
}

// startStageProcess serves stage on addr, with this process's environment
// (the test's services), and waits until it is ready.
func startStageProcess(t *testing.T, bin, stage, addr string) *stageProcess {
	t.Helper()
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), "STAGE="+stage, "LISTEN_ADDRESS="+addr, "DATABASE_MAX_CONNS=4",
		"PROVIDER_BASE_URL=http://127.0.0.1:9", "RENDER_LEASE=10s", "LOG_FORMAT=json")
	cmd.Stdout, cmd.Stderr = t.Output(), t.Output()
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	require.NoError(t, cmd.Start())
	p := &stageProcess{cmd: cmd}
	t.Cleanup(p.kill)
	require.Eventually(t, func() bool {
		resp, err := http.Get("http://" + addr + "/health/readiness")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, 30*time.Second, 50*time.Millisecond, "the %s function did not become ready", stage)
	return p
}

// running reports whether a process named comm runs in p's process group.
func (p *stageProcess) running(comm string) bool {
	dirs, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, stat := range dirs {
		b, err := os.ReadFile(stat)
		if err != nil {
			continue
		}
		// pid (comm) state ppid pgrp ...: comm may hold spaces and parens.
		s := string(b)
		open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
		if open < 0 || end < open {
			continue
		}
		fields := strings.Fields(s[end+1:])
		if len(fields) < 3 || s[open+1:end] != comm {
			continue
		}
		if pgrp, err := strconv.Atoi(fields[2]); err == nil && pgrp == p.cmd.Process.Pid {
			return true
		}
	}
	return false
}

// kill SIGKILLs the function and every child it started.
func (p *stageProcess) kill() {
	if p.cmd.Process == nil || p.cmd.ProcessState != nil {
		return
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	_ = p.cmd.Wait()
}
