package e2e_test

// Graceful shutdown (issue #5): every long-running binary is built, run as a
// real process against the real services with work in flight, sent SIGTERM,
// and must exit 0 within stopBound, saying that it stopped, with nothing
// lost or applied twice. The binaries that need no RocketMQ client (the API
// and a stage function) are tested here, with -race; relay, source and dlq
// drain in shutdown_realbroker_test.go.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/binding"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/functions/stage/stagetest"
	"github.com/aivedio/pipeline/shared/billing"
	"github.com/aivedio/pipeline/shared/catalog"
	"github.com/aivedio/pipeline/shared/dbtest"
	"github.com/aivedio/pipeline/shared/envelope"
	"github.com/aivedio/pipeline/shared/servicetest"
	"github.com/aivedio/pipeline/shared/task"
	"github.com/aivedio/pipeline/shared/tenant"
)

// stopBound is how long a binary may take from SIGTERM to exit. The
// longest legitimate stop is the source adapter's: its 30 s drain of
// deliveries in flight, which these tests never wait out.
const stopBound = 35 * time.Second

// buildBinary compiles pkg (without -race: the binary is what is tested,
// not the test) into the test's temporary directory.
func buildBinary(t *testing.T, pkg string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), filepath.Base(pkg))
	out, err := exec.Command("go", "build", "-o", bin, pkg).CombinedOutput()
	require.NoError(t, err, "go build %s: %s", pkg, out)
	return bin
}

// daemon is a binary run as a real OS process; the test reads its log
// lines as they come.
type daemon struct {
	t    *testing.T
	name string
	cmd  *exec.Cmd

	mu    sync.Mutex
	out   bytes.Buffer // everything written to stdout and stderr
	lines []string     // complete lines of out

	exited   chan struct{} // closed once the process has been waited for
	exitedAt time.Time
}

// startDaemon starts bin with args and env (added to the test's own
// environment, later entries winning) in a directory of its own. The
// process is killed at cleanup if the test left it running, and its last
// log lines are printed if the test failed.
func startDaemon(t *testing.T, name, bin string, env []string, args ...string) *daemon {
	t.Helper()
	d := &daemon{t: t, name: name, exited: make(chan struct{})}
	d.cmd = exec.Command(bin, args...)
	d.cmd.Env = append(os.Environ(), env...)
	d.cmd.Dir = t.TempDir() // func-go reads ./cfg: none here
	d.cmd.Stdout, d.cmd.Stderr = d, d
	require.NoError(t, d.cmd.Start(), "start %s", name)
	go func() {
		_ = d.cmd.Wait()
		d.mu.Lock()
		d.exitedAt = time.Now()
		d.mu.Unlock()
		close(d.exited)
	}()
	t.Cleanup(func() {
		select {
		case <-d.exited:
		default:
			_ = d.cmd.Process.Kill()
			<-d.exited
		}
		if t.Failed() {
			d.mu.Lock()
			lines := d.lines[max(0, len(d.lines)-40):]
			d.mu.Unlock()
			t.Logf("last log lines of %s:\n%s", name, strings.Join(lines, "\n"))
		}
	})
	return d
}

// Write collects the process's output; exec calls it from one goroutine
// per stream.
func (d *daemon) Write(p []byte) (int, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.out.Write(p)
	for {
		line, err := d.out.ReadString('\n')
		if err != nil { // incomplete: keep it for the next write
			rest := []byte(line)
			d.out.Reset()
			d.out.Write(rest)
			return len(p), nil
		}
		d.lines = append(d.lines, strings.TrimRight(line, "\n"))
	}
}

// line returns the first log line containing every one of parts, or "".
func (d *daemon) line(parts ...string) string {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, l := range d.lines {
		if containsAll(l, parts) {
			return l
		}
	}
	return ""
}

func containsAll(s string, parts []string) bool {
	for _, p := range parts {
		if !strings.Contains(s, p) {
			return false
		}
	}
	return true
}

// waitLine waits for a log line containing every one of parts and returns
// it; the test fails if the process exits or within passes first.
func (d *daemon) waitLine(within time.Duration, parts ...string) string {
	d.t.Helper()
	deadline := time.Now().Add(within)
	for {
		if l := d.line(parts...); l != "" {
			return l
		}
		select {
		case <-d.exited:
			if l := d.line(parts...); l != "" {
				return l
			}
			d.t.Fatalf("%s exited (%s) before logging %q", d.name, d.cmd.ProcessState, parts)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			d.t.Fatalf("%s did not log %q within %s", d.name, parts, within)
		}
	}
}

// running reports whether the process has not exited yet.
func (d *daemon) running() bool {
	select {
	case <-d.exited:
		return false
	default:
		return true
	}
}

// terminate sends SIGTERM and returns when it was sent.
func (d *daemon) terminate() time.Time {
	d.t.Helper()
	require.NoError(d.t, d.cmd.Process.Signal(syscall.SIGTERM), "SIGTERM %s", d.name)
	return time.Now()
}

// requireCleanExit waits for the process to exit and requires exit status
// 0 within stopBound of sent (its SIGTERM), and a log line containing
// stoppedLine. It returns when the process exited.
func (d *daemon) requireCleanExit(sent time.Time, stoppedLine string) time.Time {
	d.t.Helper()
	select {
	case <-d.exited:
	case <-time.After(time.Until(sent.Add(stopBound))):
		_ = d.cmd.Process.Kill()
		<-d.exited
		d.t.Fatalf("%s did not exit within %s of SIGTERM", d.name, stopBound)
	}
	d.mu.Lock()
	at := d.exitedAt
	d.mu.Unlock()
	require.Zero(d.t, d.cmd.ProcessState.ExitCode(), "%s exit status after SIGTERM (%s)", d.name, d.cmd.ProcessState)
	require.NotEmpty(d.t, d.line(stoppedLine), "%s logged no %q line", d.name, stoppedLine)
	d.t.Logf("%s exited 0 %s after SIGTERM", d.name, at.Sub(sent).Round(time.Millisecond))
	return at
}

// schemaPool opens a pool on a new migrated schema and returns it with the
// schema's DATABASE_URL, for the processes under test.
func schemaPool(t *testing.T) (*pgxpool.Pool, string) {
	t.Helper()
	url := dbtest.TestSchemaURL(t)
	pool, err := pgxpool.New(t.Context(), url)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool, url
}

// rowLock holds a lock in its own transaction until released, so that the
// process under test blocks on it mid-flight.
type rowLock struct {
	tx  pgx.Tx
	pid int // the backend holding the lock
}

// lockRows runs sql (which takes locks) in a transaction left open until
// release (which rolls it back) or the end of the test.
func lockRows(t *testing.T, pool *pgxpool.Pool, sql string, args ...any) *rowLock {
	t.Helper()
	tx, err := pool.Begin(t.Context())
	require.NoError(t, err)
	t.Cleanup(func() { _ = tx.Rollback(context.WithoutCancel(t.Context())) })
	_, err = tx.Exec(t.Context(), sql, args...)
	require.NoError(t, err)
	l := &rowLock{tx: tx}
	require.NoError(t, tx.QueryRow(t.Context(), `SELECT pg_backend_pid()`).Scan(&l.pid))
	return l
}

// waitBlocked waits until some other backend waits for the lock.
func (l *rowLock) waitBlocked(t *testing.T, pool *pgxpool.Pool, within time.Duration) {
	t.Helper()
	require.Eventually(t, func() bool {
		var n int
		require.NoError(t, pool.QueryRow(t.Context(),
			`SELECT count(*) FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid))`, l.pid).Scan(&n))
		return n > 0
	}, within, 10*time.Millisecond, "nothing blocked on the lock")
}

// release rolls the lock's transaction back.
func (l *rowLock) release(t *testing.T) {
	t.Helper()
	require.NoError(t, l.tx.Rollback(t.Context()))
}

// refused reports whether addr refuses new connections.
func refused(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err == nil {
		_ = c.Close()
		return false
	}
	return errors.Is(err, syscall.ECONNREFUSED)
}

// freeAddr returns a loopback address nothing listens on, for a binary
// that does not report the port it was given (func-go).
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	return addr
}

// fieldOf returns the value of key=value in a text log line.
func fieldOf(t *testing.T, line, key string) string {
	t.Helper()
	for _, f := range strings.Fields(line) {
		if v, ok := strings.CutPrefix(f, key+"="); ok {
			return v
		}
	}
	t.Fatalf("no %s= in log line %q", key, line)
	return ""
}

// stageEnv is the environment config.StageFunction and config.APIServer
// need besides DATABASE_URL: the real Redis and S3, and a provider that is
// never called.
func stageEnv(t *testing.T) []string {
	return []string{
		"REDIS_URL=" + servicetest.Env(t, "Redis", "REDIS_URL"),
		"S3_ENDPOINT=" + servicetest.Env(t, "S3", "S3_ENDPOINT"),
		"PROVIDER_BASE_URL=http://127.0.0.1:9", // discard: no stage here calls it
		"HTTP_ADDR=127.0.0.1:0",
		"LOG_FORMAT=text",
	}
}

// TestAPIShutdown stops the API with SIGTERM while a create waits inside
// its transaction (on a row lock the test holds) and an event stream is
// open: the server refuses new connections at once, closes the stream with
// its closing comment, lets the create commit and answer 202, and exits 0.
// The task exists once, with its reservation and its submit event.
func TestAPIShutdown(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool, dbURL := schemaPool(t)
	var key string
	var tenantID uuid.UUID
	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		c, err := tenant.Create(ctx, tx, tenant.NewTenant{Name: "shutdown", Priority: 9, Credits: 1000}, tenant.RoleTenant)
		key, tenantID = c.Key, c.TenantID
		return err
	}))

	api := startDaemon(t, "api", buildBinary(t, "github.com/aivedio/pipeline/functions/cmd/api"),
		append(stageEnv(t), "DATABASE_URL="+dbURL, "API_ADDR=127.0.0.1:0"))
	addr := fieldOf(t, api.waitLine(30*time.Second, `msg="api serving"`), "addr")
	base := "http://" + addr
	client := &http.Client{Timeout: stopBound}

	// An open event stream, past its first frame.
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/v1/events", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+key)
	var stream *http.Response
	require.Eventually(t, func() bool { // 503 until the Redis subscription is up
		resp, err := client.Do(req)
		if err != nil {
			return false
		}
		if resp.StatusCode == http.StatusOK {
			stream = resp
			return true
		}
		_ = resp.Body.Close()
		return false
	}, 10*time.Second, 100*time.Millisecond)
	defer stream.Body.Close()
	frames := bufio.NewReader(stream.Body)
	first, err := frames.ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "retry: 2000\n", first)

	// A create that waits for the tenant's credit account inside its
	// transaction.
	lock := lockRows(t, pool, `SELECT 1 FROM credit_accounts WHERE tenant_id = $1 FOR UPDATE`, tenantID)
	type answer struct {
		status int
		body   string
		err    error
	}
	created := make(chan answer, 1)
	go func() {
		body := `{"model":"minimax/video-01","prompt":"a lighthouse at dusk","duration_seconds":4,"resolution":"640x360"}`
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/generations", strings.NewReader(body))
		if err != nil {
			created <- answer{err: err}
			return
		}
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("Idempotency-Key", "shutdown-1")
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			created <- answer{err: err}
			return
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		created <- answer{status: resp.StatusCode, body: string(b), err: err}
	}()
	lock.waitBlocked(t, pool, 10*time.Second)

	sent := api.terminate()
	api.waitLine(5*time.Second, `msg="api stopping"`)
	require.Eventually(t, func() bool { return refused(addr) }, 5*time.Second, 20*time.Millisecond,
		"the API still accepts connections after SIGTERM")

	// The stream ends cleanly (EOF, not a reset), after saying why.
	rest, err := io.ReadAll(frames)
	require.NoError(t, err, "the event stream ends cleanly")
	require.Contains(t, string(rest), ": closed: ", "the stream says why it closed")

	// The create is still waiting, and the server with it.
	time.Sleep(500 * time.Millisecond)
	require.True(t, api.running(), "the API exited with a request in flight")
	lock.release(t)
	a := <-created
	require.NoError(t, a.err)
	require.Equal(t, http.StatusAccepted, a.status, "the create in flight answers: %s", a.body)
	var ref struct {
		TaskID uuid.UUID `json:"task_id"`
	}
	require.NoError(t, json.Unmarshal([]byte(a.body), &ref))
	api.requireCleanExit(sent, `msg="api stopped"`)

	// Committed whole, once.
	var tasks, reservations, submits int
	require.NoError(t, pool.QueryRow(ctx, `SELECT
		(SELECT count(*) FROM generation_tasks WHERE tenant_id = $1),
		(SELECT count(*) FROM credit_reservations WHERE task_id = $2),
		(SELECT count(*) FROM outbox_events WHERE event_type = $3 AND aggregate_id = $4)`,
		tenantID, ref.TaskID, catalog.EventSubmitRequested, ref.TaskID.String()).Scan(&tasks, &reservations, &submits))
	require.Equal(t, []int{1, 1, 1}, []int{tasks, reservations, submits}, "task, reservation and submit event")
}

// TestFunctionShutdown stops the settle stage function (func-go's runtime,
// STAGE=settle) with SIGTERM while it handles an event that waits on the
// task's row lock: the event is finished and answered 200, settled once,
// and the process exits 0.
func TestFunctionShutdown(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool, dbURL := schemaPool(t)
	tk := succeededTask(t, pool, 20)

	addr := freeAddr(t)
	fn := startDaemon(t, "function", buildBinary(t, "github.com/aivedio/pipeline/functions/cmd/function"),
		append(stageEnv(t), "DATABASE_URL="+dbURL, "STAGE=settle", "LISTEN_ADDRESS="+addr))
	fn.waitLine(30*time.Second, `"function started"`)
	base := "http://" + addr
	require.Eventually(t, func() bool {
		resp, err := http.Get(base + "/health/readiness")
		if err != nil {
			return false
		}
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, 10*time.Second, 50*time.Millisecond)

	// A settle event that waits for the task's row.
	lock := lockRows(t, pool, `SELECT 1 FROM generation_tasks WHERE task_id = $1 FOR UPDATE`, tk.ID)
	env, err := envelope.New(envelope.NewParams{EventType: catalog.EventSettleRequested, Producer: "e2e",
		AggregateType: task.AggregateType, AggregateID: tk.ID.String(), TenantID: tk.TenantID.String(),
		Payload: task.SettleRequested{TaskID: tk.ID, Status: task.Succeeded}})
	require.NoError(t, err)
	ce, err := env.ToCloudEvent()
	require.NoError(t, err)
	type answer struct {
		status int
		err    error
	}
	answered := make(chan answer, 1)
	go func() {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, base, nil)
		if err == nil {
			err = cehttp.WriteRequest(ctx, binding.ToMessage(&ce), req)
		}
		if err != nil {
			answered <- answer{err: err}
			return
		}
		resp, err := (&http.Client{Timeout: stopBound}).Do(req)
		if err != nil {
			answered <- answer{err: err}
			return
		}
		_ = resp.Body.Close()
		answered <- answer{status: resp.StatusCode}
	}()
	lock.waitBlocked(t, pool, 10*time.Second)

	sent := fn.terminate()
	fn.waitLine(5*time.Second, `"function stopping"`)
	require.Eventually(t, func() bool { return refused(addr) }, 5*time.Second, 20*time.Millisecond,
		"the function still accepts connections after SIGTERM")
	time.Sleep(500 * time.Millisecond)
	require.True(t, fn.running(), "the function exited with an event in flight")
	lock.release(t)

	a := <-answered
	require.NoError(t, a.err, "the event in flight is answered, not dropped")
	fn.requireCleanExit(sent, `"function stopped"`)

	var reservation string
	var inboxRows, captures int
	require.NoError(t, pool.QueryRow(ctx, `SELECT
		(SELECT status FROM credit_reservations WHERE task_id = $1),
		(SELECT count(*) FROM inbox_dedup WHERE consumer_name = $2 AND event_id = $3),
		(SELECT count(*) FROM credit_ledger WHERE tenant_id = $4 AND ledger_business_type = $5)`,
		tk.ID, catalog.GroupSettle.Name, env.EventID, tk.TenantID, billing.EntryCapture).Scan(&reservation, &inboxRows, &captures))
	// A stop drains: the event in flight finishes its work and is
	// answered 200, settled once; a 5xx would be a delivery thrown away
	// by a routine scale-down.
	require.Equal(t, http.StatusOK, a.status, "the event in flight at SIGTERM is finished, not failed")
	require.Equal(t, []any{billing.Captured, 1, 1}, []any{reservation, inboxRows, captures}, "answered 200: settled once")
}

// succeededTask makes a tenant and a SUCCEEDED task holding a reservation
// of amount, through the state machine as the stages would.
func succeededTask(t *testing.T, pool *pgxpool.Pool, amount int64) task.Task {
	t.Helper()
	cur := stagetest.NewTask(t, pool, &stagetest.TaskOpts{Reserved: amount},
		task.Transition{To: task.Submitting, Set: task.Fields{Provider: task.Ptr("fake")}},
		task.Transition{To: task.ProviderRunning, Set: task.Fields{ProviderJobID: task.Ptr("job-1")}},
		task.Transition{To: task.Fetching}, task.Transition{To: task.MediaProcessing}, task.Transition{To: task.Succeeded})
	require.Equal(t, task.Succeeded, cur.Status)
	return cur
}
