//go:build !race

package e2e_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/adapter/mq/rocketmqtest"
	"github.com/aivedio/pipeline/functions/stage"
	"github.com/aivedio/pipeline/shared/catalog"
	"github.com/aivedio/pipeline/shared/dbtest"
	"github.com/aivedio/pipeline/shared/outbox"
	"github.com/aivedio/pipeline/shared/servicetest"
)

// process is one adapter command run as a real OS process, killable and
// restartable.
type process struct {
	t    *testing.T
	name string
	bin  string
	args []string
	env  []string
	logs *os.File

	mu    sync.Mutex
	cmd   *exec.Cmd
	kills int
}

func (p *process) start() {
	p.t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	cmd := exec.Command(p.bin, p.args...)
	cmd.Env = p.env
	cmd.Stdout, cmd.Stderr = p.logs, p.logs
	require.NoError(p.t, cmd.Start())
	p.cmd = cmd
}

// kill sends SIGKILL: no cleanup, no ACK, no published mark.
func (p *process) kill() {
	p.mu.Lock()
	defer p.mu.Unlock()
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	_ = p.cmd.Wait()
	p.kills++
	fmt.Fprintf(p.logs, "=== test: SIGKILL %s (%d)\n", p.name, p.kills)
}

// stop sends SIGTERM and waits: the graceful path.
func (p *process) stop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = p.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		<-done
		p.t.Errorf("%s did not stop within 30 s of SIGTERM", p.name)
	}
}

// buildAdapter compiles `adapter` once for the test.
func buildAdapter(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "adapter")
	out, err := exec.Command("go", "build", "-o", bin, "github.com/aivedio/pipeline/adapter").CombinedOutput()
	require.NoError(t, err, "go build ./adapter: %s", out)
	return bin
}

// schemaURL is the database URL of the pool's test schema.
func schemaURL(t *testing.T, schema string) string {
	t.Helper()
	u, err := url.Parse(servicetest.Env(t, "PostgreSQL", "DATABASE_URL"))
	require.NoError(t, err)
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String()
}

// TestRealBrokerSIGKILL runs the relay and the source adapter as real
// processes and kills them with SIGKILL at random moments, restarting each,
// while 2,000 events flow through the real proxy into an inbox-protected
// stage. Every event's effect happens exactly once and none is lost.
func TestRealBrokerSIGKILL(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cfg := rocketmqtest.Config(t)
	pool := dbtest.TestSchema(t)
	createEffects(t, pool)
	var schema string
	require.NoError(t, pool.QueryRow(ctx, `SELECT current_schema()`).Scan(&schema))
	run := rocketmqtest.UniqueName("run")

	// The catalog's settle group and topic, as deployed; events of other runs
	// on a shared broker are stale no-ops for this stage.
	group := catalog.GroupSettle
	fn := effectStage(pool, group.Name, catalog.EventSettleRequested, run)
	// The stage is served the way the stage binary serves it: through
	// stage.HTTPHandler. func-go's own handler (sdk-go's receiver) can strand
	// a request under concurrent deliveries, and a stranded request kept
	// httptest's Close waiting for good once (the test ran into its timeout).
	// Every delivery that reaches the stage is counted by event id: more
	// deliveries than events means a kill landed where it matters (a
	// source killed holding handled but unacknowledged messages, a relay
	// killed between its send and its mark), and the inbox absorbed the
	// repeats.
	//
	// Random kills alone seldom land there (a run of 9 kills once made no
	// repeat at all), so three deliveries also kill the source themselves:
	// after the stage committed, before the source hears the answer. The
	// messages it held come back, and the inbox must absorb them.
	var (
		deliveredMu sync.Mutex
		delivered   = map[string]int{}
		cycle       sync.Mutex // one kill-and-restart at a time
		sourceProc  *process
	)
	killAt := map[int]bool{200: true, 800: true, 1400: true}
	handler := stage.HTTPHandler(fn.Handle)
	stageServer := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		deliveredMu.Lock()
		delivered[r.Header.Get("Ce-Id")]++
		kill := delivered[r.Header.Get("Ce-Id")] == 1 && killAt[len(delivered)]
		deliveredMu.Unlock()
		if !kill {
			handler.ServeHTTP(w, r)
			return
		}
		rec := httptest.NewRecorder()
		handler.ServeHTTP(rec, r)
		cycle.Lock()
		sourceProc.kill()
		sourceProc.start()
		cycle.Unlock()
		for k, v := range rec.Header() {
			w.Header()[k] = v
		}
		w.WriteHeader(rec.Code)
		_, _ = w.Write(rec.Body.Bytes())
	}))
	t.Cleanup(stageServer.Close)

	bin := buildAdapter(t)
	logs, err := os.Create(filepath.Join(t.TempDir(), "processes.log"))
	require.NoError(t, err)
	env := append(os.Environ(),
		"DATABASE_URL="+schemaURL(t, schema),
		"ROCKETMQ_ENDPOINT="+cfg.Endpoint,
		"HTTP_ADDR=127.0.0.1:0",
		"LOG_FORMAT=text",
		"RELAY_LEASE=2s",
		"SOURCE_INVISIBLE=10s",
		"SOURCE_HANDLER_TIMEOUT=5s",
		"SOURCE_COLD_START=2s",
	)
	relayProc := &process{t: t, name: "relay", bin: bin, args: []string{"relay"}, env: env, logs: logs}
	sourceProc = &process{t: t, name: "source", bin: bin, args: []string{"source", "--group", group.Name, "--sink", stageServer.URL}, env: env, logs: logs}
	relayProc.start()
	sourceProc.start()
	// A failed run must not leave its processes behind: a source left
	// running in the catalog's group would take the next run's messages.
	t.Cleanup(func() {
		for _, p := range []*process{relayProc, sourceProc} {
			p.mu.Lock()
			if p.cmd != nil && p.cmd.ProcessState == nil {
				_ = p.cmd.Process.Kill()
				_ = p.cmd.Wait()
			}
			p.mu.Unlock()
		}
	})
	t.Cleanup(func() {
		if t.Failed() {
			out, _ := os.ReadFile(logs.Name())
			lines := strings.Split(string(out), "\n")
			t.Logf("last process log lines:\n%s", strings.Join(lines[max(0, len(lines)-60):], "\n"))
		}
	})

	const n = 2000
	var events []outbox.Event
	for i := range n {
		events = append(events, newEvent(t, catalog.BillingSettle, catalog.EventSettleRequested, "", run, i))
	}
	writeDone := make(chan error, 1)
	go func() {
		// Spread the writes over ~10 s so the kills land mid-stream.
		for i := 0; i < n; i += 100 {
			if err := writeEvents(ctx, pool, events[i:min(i+100, n)], 20); err != nil {
				writeDone <- err
				return
			}
			time.Sleep(500 * time.Millisecond)
		}
		writeDone <- nil
	}()

	// Chaos until the writes are done and a little after, from a seed
	// that is logged, so a failure replays.
	seed := uint64(time.Now().UnixNano())
	t.Logf("kill schedule seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, seed))
	chaosUntil := time.Now().Add(14 * time.Second)
	for time.Now().Before(chaosUntil) {
		time.Sleep(time.Duration(400+rng.IntN(1200)) * time.Millisecond)
		victim := relayProc
		if rng.IntN(2) == 0 {
			victim = sourceProc
		}
		cycle.Lock()
		victim.kill()
		time.Sleep(time.Duration(100+rng.IntN(700)) * time.Millisecond)
		victim.start()
		cycle.Unlock()
	}
	require.NoError(t, <-writeDone)
	t.Logf("SIGKILLs: relay %d, source %d", relayProc.kills, sourceProc.kills)
	require.Positive(t, relayProc.kills+sourceProc.kills)

	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		var unpublished, inbox, failures int
		_ = pool.QueryRow(context.Background(), `SELECT (SELECT count(*) FROM outbox_events WHERE published_at IS NULL),
			(SELECT count(*) FROM inbox_dedup), (SELECT count(*) FROM delivery_failures)`).Scan(&unpublished, &inbox, &failures)
		deliveredMu.Lock()
		reached := len(delivered)
		deliveredMu.Unlock()
		t.Logf("on failure: %d outbox rows unpublished, %d inbox rows, %d delivery failure records, %d distinct events reached the stage", unpublished, inbox, failures, reached)
	})
	waitForEffects(t, pool, n, 3*time.Minute)
	// Redeliveries of deliveries cut short by the kills arrive within the
	// invisible time; give them that long to show up as duplicates.
	time.Sleep(12 * time.Second)
	rows, distinct := effectCounts(t, pool)
	require.Equal(t, n, distinct, "no event lost")
	require.Equal(t, n, rows, "no event applied twice")
	var pending int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM outbox_events WHERE published_at IS NULL`).Scan(&pending))
	require.Zero(t, pending, "every outbox row published")
	deliveredMu.Lock()
	deliveries, repeated := 0, 0
	for id, k := range delivered {
		if id == "" {
			continue
		}
		deliveries += k
		if k > 1 {
			repeated++
		}
	}
	deliveredMu.Unlock()
	t.Logf("%d deliveries of %d events reached the stage; %d events came more than once, each applied once", deliveries, n, repeated)
	require.Positive(t, repeated, "no kill landed between a delivery and its ACK or between a send and its mark: the test proved nothing (seed %d)", seed)
	require.Positive(t, sourceProc.kills, "the source was killed")

	relayProc.stop()
	sourceProc.stop()
}
