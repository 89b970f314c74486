package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/local/drive"
	"github.com/aivedio/pipeline/local/providersim"
	"github.com/aivedio/pipeline/shared/blob"
	"github.com/aivedio/pipeline/shared/config"
	"github.com/aivedio/pipeline/shared/servicetest"
)

// kill9Generations are submitted before the kill.
const kill9Generations = 10

// kill9Converge bounds the time from the second start until every
// generation has ended.
const kill9Converge = 2 * time.Minute

// TestKillNineAndRestart does what a new user does: `go run ./local` (the
// built binary, every service embedded, as whatever user the tests run as,
// root included), ten generations through the API, kill -9 while some run,
// and the same command again on the same data directory. The second run
// must start by itself (the first one's PostgreSQL still runs), every
// generation must end within kill9Converge of it with its invariants
// (one capture per success, no remote job twice per attempt key, every
// derivative in object storage), and every generation that had succeeded
// before the kill must still download, with the same bytes.
func TestKillNineAndRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the local binary twice (about a minute)")
	}
	if _, err := exec.LookPath("ffmpeg"); err != nil {
		// The binary runs the ffmpeg on PATH (its simulator and media
		// stages), not FFMPEG_PATH; where services are required a missing
		// one is a broken setup, not a reason to prove nothing.
		if servicetest.Required() {
			t.Fatalf("needs ffmpeg on PATH (make services-up installs it): %v", err)
		}
		t.Skip("needs ffmpeg (make run installs it)")
	}
	t.Parallel()
	bin := filepath.Join(t.TempDir(), "local")
	build := exec.Command("go", "build", "-o", bin, ".")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "go build ./local: %s", out)

	// As root the embedded PostgreSQL runs as nobody, who must reach the
	// data directory: t.TempDir's folders are closed to others.
	dir, err := os.MkdirTemp("", "aivedio-kill9-*")
	require.NoError(t, err)
	require.NoError(t, os.Chmod(dir, 0o755))
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	data := filepath.Join(dir, "data")
	apiAddr, opsAddr := freeAddr(t), freeAddr(t)

	first := startLocal(t, bin, data, apiAddr, opsAddr, filepath.Join(dir, "run1.log"))
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	p := drive.Params{APIURL: first.api, Key: first.key, Client: &http.Client{Timeout: 30 * time.Second}}
	var tasks []uuid.UUID
	prompts := map[uuid.UUID]string{}
	for i := range kill9Generations {
		id, prompt := createGeneration(ctx, t, p, first.model, i)
		tasks = append(tasks, id)
		prompts[id] = prompt
	}

	// Kill once some have succeeded and some still run; remember what the
	// succeeded ones download.
	before := map[uuid.UUID]string{}
	deadline := time.Now().Add(90 * time.Second)
	for {
		statuses := map[uuid.UUID]string{}
		running := 0
		for _, id := range tasks {
			g := getGeneration(ctx, t, p, id)
			statuses[id] = g.Status
			if !finished(g.Status) {
				running++
			}
		}
		succeeded := 0
		for _, s := range statuses {
			if s == "SUCCEEDED" {
				succeeded++
			}
		}
		if (succeeded >= 2 && running >= 3) || (succeeded >= 1 && time.Now().After(deadline)) {
			for id, s := range statuses {
				if s == "SUCCEEDED" {
					before[id] = download(ctx, t, p, id)
				}
			}
			t.Logf("kill -9 with %d succeeded, %d running: %v", succeeded, running, statuses)
			break
		}
		require.False(t, time.Now().After(deadline.Add(30*time.Second)), "no generation succeeded in time before the kill: %v\n%s", statuses, first.logTail())
		time.Sleep(200 * time.Millisecond)
	}
	first.kill(t)

	restarted := time.Now()
	second := startLocal(t, bin, data, apiAddr, opsAddr, filepath.Join(dir, "run2.log"))
	t.Logf("second run up in %s", time.Since(restarted).Round(100*time.Millisecond))
	t.Cleanup(func() { second.stop(t) })
	require.Contains(t, second.logText(), "that an earlier run of this data directory left behind",
		"the first run's PostgreSQL outlived it, and the second stopped it")
	p.APIURL = second.api

	// Every generation ends, within kill9Converge of the restart.
	final := map[uuid.UUID]string{}
	for len(final) < len(tasks) {
		for _, id := range tasks {
			if _, ok := final[id]; ok {
				continue
			}
			if g := getGeneration(ctx, t, p, id); finished(g.Status) {
				final[id] = g.Status
				if g.Status != "SUCCEEDED" {
					t.Logf("generation %s ended %s: %+v", id, g.Status, g.Error)
				}
			}
		}
		if len(final) < len(tasks) && time.Since(restarted) > kill9Converge {
			require.Failf(t, "generations did not converge after the restart", "%d of %d ended within %s: %v\n%s",
				len(final), len(tasks), kill9Converge, final, second.logTail())
		}
		time.Sleep(300 * time.Millisecond)
	}
	t.Logf("all %d generations ended %s after the restart: %v", len(tasks), time.Since(restarted).Round(time.Second), final)
	for id, s := range final {
		// The simulator injects no faults here: nothing but the kill can
		// fail a generation, and the kill must not.
		require.Equal(t, "SUCCEEDED", s, "generation %s", id)
	}

	// What succeeded before the kill still downloads, with the same bytes.
	for id, sum := range before {
		require.Equal(t, sum, download(ctx, t, p, id), "generation %s downloads other bytes after the restart", id)
	}

	// The invariants, read from the embedded services themselves.
	pool, err := pgxpool.New(ctx, second.dbURL)
	require.NoError(t, err)
	defer pool.Close()
	store, err := blob.New(ctx, config.S3{Endpoint: second.s3URL, Region: "us-east-1", Bucket: "aivedio-media",
		AccessKeyID: "local", SecretAccessKey: "local-secret"})
	require.NoError(t, err)
	stats := simStats(ctx, t, second.sim)
	res := drive.Result{Tasks: tasks, Final: final, Prompts: prompts, Stream: map[uuid.UUID][]int64{}}
	rep, err := drive.Check(ctx, drive.Facts{Pool: pool, Blob: store, JobsByKey: stats.JobsByIdempotencyKey, JobsByPrompt: stats.JobsByPrompt,
		Attention: []string{"reconcile.submit_unknown"}, // Runway, which go run ./local fails over to, has no lookup
		// go run ./local's simulators inject no fault: no failure is explained.
		Failed:       drive.FailedBy(nil, providersim.DefaultOptions()),
		StreamUnseen: "the event streams the driver read died with the killed process, and a new stream starts from the restart"}, res)
	require.NoError(t, err)
	require.Empty(t, rep.Violations)
	require.GreaterOrEqual(t, rep.RemoteJobs, len(tasks), "the simulators' jobs are counted by the prompts the tasks asked for")
	require.GreaterOrEqual(t, stats.JobsCreated, len(tasks), "the simulator forgot jobs of the first run")
	t.Logf("attempts %d, most remote jobs per attempt key %d and per task %d, credits charged %d, simulator jobs %d; stream check skipped: %s",
		rep.Attempts, rep.MaxJobsPerKey, rep.MaxJobsPerTask, rep.CreditsCharged, stats.JobsCreated, rep.StreamSkipped)
}

// localRun is one started `go run ./local`.
type localRun struct {
	cmd                                *exec.Cmd
	waited                             chan error
	log                                *os.File
	api, key, model, sim, dbURL, s3URL string
}

var (
	bannerAPI   = regexp.MustCompile(`(?m)^  API        (\S+)`)
	bannerKey   = regexp.MustCompile(`(?m)^  dev key    (\S+)`)
	bannerSim   = regexp.MustCompile(`(?m)^  simulator  (\S+)`)
	bannerDB    = regexp.MustCompile(`(?m)^  database   (\S+)`)
	bannerS3    = regexp.MustCompile(`(?m)^  objects    (\S+)`)
	bannerModel = regexp.MustCompile(`"model":"([^"]+)"`)
)

// startLocal runs bin with every service embedded in data and waits for
// its banner. The test's own service variables (make test sets them) are
// not passed on: this is the run of a user who has none.
func startLocal(t *testing.T, bin, data, apiAddr, opsAddr, logPath string) *localRun {
	t.Helper()
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	require.NoError(t, err)
	t.Cleanup(func() { _ = logf.Close() })
	cmd := exec.Command(bin, "-api-addr", apiAddr, "-ops-addr", opsAddr)
	cmd.Env = append(embeddedEnv(), "LOCAL_DATA_DIR="+data,
		// Jobs long enough that some still run at the kill.
		"PROVIDERSIM_JOB_DURATION_MIN=2s", "PROVIDERSIM_JOB_DURATION_MAX=12s")
	cmd.Stderr = logf
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	r := &localRun{cmd: cmd, waited: make(chan error, 1), log: logf}
	// Whatever happens to the test, nothing it started outlives it: the
	// program, and the PostgreSQL a kill -9 leaves behind.
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGKILL)
		stopPostgres(data)
	})
	banner := make(chan string, 1)
	go func() {
		var b bytes.Buffer
		sc := bufio.NewScanner(stdout)
		sent := false
		for sc.Scan() {
			if !sent {
				b.WriteString(sc.Text() + "\n")
				if strings.HasPrefix(sc.Text(), "Ctrl-C stops everything") {
					banner <- b.String()
					sent = true
				}
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
	}()
	go func() { r.waited <- cmd.Wait() }()
	select {
	case text := <-banner:
		for re, dst := range map[*regexp.Regexp]*string{bannerAPI: &r.api, bannerKey: &r.key, bannerSim: &r.sim, bannerDB: &r.dbURL,
			bannerS3: &r.s3URL, bannerModel: &r.model} {
			m := re.FindStringSubmatch(text)
			require.NotNil(t, m, "banner without %s:\n%s", re, text)
			*dst = m[1]
		}
	case err := <-r.waited:
		require.Failf(t, "go run ./local did not start", "%v\n%s", err, r.logTail())
	case <-time.After(3 * time.Minute):
		r.kill(t)
		require.Failf(t, "go run ./local printed no banner within 3 minutes", "%s", r.logTail())
	}
	return r
}

// embeddedEnv is this process's environment without the variables that
// select real services, tracing or another data directory.
func embeddedEnv() []string {
	return slices.DeleteFunc(os.Environ(), func(kv string) bool {
		name, _, _ := strings.Cut(kv, "=")
		return slices.Contains([]string{"DATABASE_URL", "REDIS_URL", "LOCAL_DATA_DIR"}, name) ||
			strings.HasPrefix(name, "S3_") || strings.HasPrefix(name, "ROCKETMQ_") || strings.HasPrefix(name, "OTEL_") ||
			strings.HasPrefix(name, "PROVIDERSIM_")
	})
}

// stopPostgres stops the embedded PostgreSQL of data if it still runs.
func stopPostgres(data string) {
	b, err := os.ReadFile(filepath.Join(data, "postgres", "data", "postmaster.pid"))
	if err != nil {
		return
	}
	first, _, _ := strings.Cut(string(b), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(first))
	if err != nil || pid <= 0 {
		return
	}
	_ = syscall.Kill(pid, syscall.SIGINT)
	for range 300 {
		if syscall.Kill(pid, 0) != nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// kill is kill -9, and waits until the process is gone.
func (r *localRun) kill(t *testing.T) {
	t.Helper()
	_ = r.cmd.Process.Signal(syscall.SIGKILL)
	<-r.waited
}

// stop is Ctrl-C, and waits.
func (r *localRun) stop(t *testing.T) {
	t.Helper()
	_ = r.cmd.Process.Signal(os.Interrupt)
	select {
	case <-r.waited:
	case <-time.After(time.Minute):
		t.Errorf("go run ./local did not stop within a minute of Ctrl-C")
		r.kill(t)
	}
}

// logText is the run's whole log.
func (r *localRun) logText() string {
	b, _ := os.ReadFile(r.log.Name())
	return string(b)
}

// logTail is the end of the run's log without the API's request lines,
// for a failure message.
func (r *localRun) logTail() string {
	lines := slices.DeleteFunc(strings.Split(r.logText(), "\n"), func(l string) bool { return strings.Contains(l, "msg=request ") })
	return strings.Join(lines[max(len(lines)-60, 0):], "\n")
}

// generation is the part of GET /v1/generations/{id} the test reads.
type generation struct {
	Status  string `json:"status"`
	Outputs []struct {
		Kind        string `json:"kind"`
		DownloadURL string `json:"download_url"`
	} `json:"outputs"`
	Error *struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// createGeneration asks for a generation and returns its task and its
// prompt, unique to the run.
func createGeneration(ctx context.Context, t *testing.T, p drive.Params, model string, i int) (uuid.UUID, string) {
	t.Helper()
	prompt := fmt.Sprintf("kill -9 test %d: a red fox running through snow", i)
	body := fmt.Sprintf(`{"model":%q,"prompt":%q,"duration_seconds":%d,"resolution":"1280x720"}`,
		model, prompt, 2+i%3)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.APIURL+"/v1/generations", strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+p.Key)
	req.Header.Set("Idempotency-Key", uuid.NewString())
	req.Header.Set("Content-Type", "application/json")
	var out struct {
		TaskID uuid.UUID `json:"task_id"`
	}
	apiCall(t, p.Client, req, &out)
	return out.TaskID, prompt
}

func getGeneration(ctx context.Context, t *testing.T, p drive.Params, id uuid.UUID) generation {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.APIURL+"/v1/generations/"+id.String(), nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+p.Key)
	var g generation
	apiCall(t, p.Client, req, &g)
	return g
}

// download is the sha256 of a generation's first output, through the
// download URL the API hands out.
func download(ctx context.Context, t *testing.T, p drive.Params, id uuid.UUID) string {
	t.Helper()
	g := getGeneration(ctx, t, p, id)
	require.NotEmpty(t, g.Outputs, "generation %s has no output", id)
	require.NotEmpty(t, g.Outputs[0].DownloadURL, "generation %s has no download URL", id)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, g.Outputs[0].DownloadURL, nil)
	require.NoError(t, err)
	resp, err := p.Client.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, "download of generation %s", id)
	h := sha256.New()
	n, err := io.Copy(h, resp.Body)
	require.NoError(t, err)
	require.Positive(t, n)
	return hex.EncodeToString(h.Sum(nil))
}

func apiCall(t *testing.T, c *http.Client, req *http.Request, out any) {
	t.Helper()
	resp, err := c.Do(req)
	require.NoError(t, err, "%s %s", req.Method, req.URL.Path)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Contains(t, []int{http.StatusOK, http.StatusCreated, http.StatusAccepted}, resp.StatusCode, "%s %s: %s", req.Method, req.URL.Path, body)
	require.NoError(t, json.Unmarshal(body, out), "%s", body)
}

func simStats(ctx context.Context, t *testing.T, simURL string) providersim.Stats {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, simURL+"/sim/stats", nil)
	require.NoError(t, err)
	var st providersim.Stats
	apiCall(t, http.DefaultClient, req, &st)
	return st
}

// freeAddr is a loopback address no one listens on, for both runs: the
// provider's webhooks of the first run's jobs go to the same API.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	return ln.Addr().String()
}

// finished reports whether a generation's status is terminal.
func finished(status string) bool {
	switch status {
	case "SUCCEEDED", "FAILED", "CANCELED", "CANCELED_WITH_OUTPUT", "NEEDS_ATTENTION":
		return true
	}
	return false
}
