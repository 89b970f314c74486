package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/functions/stage/stagetest"
	"github.com/aivedio/pipeline/local/reviewsim"
	"github.com/aivedio/pipeline/shared/billing"
	"github.com/aivedio/pipeline/shared/dbtest"
	"github.com/aivedio/pipeline/shared/task"
)

// TestSupervisorRestartsWhatDies: a killed process is started again and
// counted; a stopped one stays stopped; a process that dies at once is
// restarted with a growing delay instead of in a tight loop.
func TestSupervisorRestartsWhatDies(t *testing.T) {
	t.Parallel()
	sleep, err := exec.LookPath("sleep")
	require.NoError(t, err)
	logs, err := os.Create(filepath.Join(t.TempDir(), "p.log"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = logs.Close() })
	p := &proc{name: "sleeper", kind: "test", bin: sleep, args: []string{"60"}, logs: logs}
	require.NoError(t, p.start())
	first := p.pid()
	require.True(t, p.kill())
	require.Eventually(t, func() bool { return p.pid() != first && p.pid() != 0 }, 5*time.Second, 20*time.Millisecond, "started again")
	require.Equal(t, 1, p.deathCount())
	p.stop(5 * time.Second)
	require.False(t, p.kill(), "a stopped process is not signalled")

	crash := &proc{name: "crasher", kind: "test", bin: "/bin/false", logs: logs}
	require.NoError(t, crash.start())
	time.Sleep(3500 * time.Millisecond)
	crash.stop(time.Second)
	// Restarted after 1 s, then 2 s, then 4 s: three runs in 3.5 s, where a
	// fixed half second would make seven.
	require.LessOrEqual(t, crash.deathCount(), 4)
	require.GreaterOrEqual(t, crash.deathCount(), 2)
}

func TestParseKinds(t *testing.T) {
	t.Parallel()
	kinds, err := parseKinds(allKinds)
	require.NoError(t, err)
	require.Len(t, kinds, 9)
	_, err = parseKinds("kill,meteor")
	require.ErrorContains(t, err, `unknown fault kind "meteor"`)
	_, err = parseKinds(" , ")
	require.ErrorContains(t, err, "no fault kinds")
	require.Equal(t, 1, serviceBudget(75*time.Second))
	require.Equal(t, 2, serviceBudget(4*time.Minute))
}

func TestReportHoldsOnlyWhenEveryInvariantHeld(t *testing.T) {
	t.Parallel()
	var r report
	require.False(t, r.held(), "nothing checked is nothing proven")
	r.add("a", true, "fine")
	require.True(t, r.held())
	r.add("b", false, "%d broken", 2)
	require.False(t, r.held())
	var out strings.Builder
	r.print(&out)
	require.Contains(t, out.String(), "INVARIANTS BROKEN")
	require.Contains(t, out.String(), "2 broken")
	require.Contains(t, out.String(), "renders: map[]; 0 reused")
}

func TestRenderClipChoice(t *testing.T) {
	t.Parallel()
	used := map[[2]string]bool{}
	_, ok := pickClips([]string{"a"}, used)
	require.False(t, ok, "one clip makes no pair")

	clips := []string{"a", "b", "c"}
	var got [][2]string
	for range 4 {
		p, ok := pickClips(clips, used)
		require.True(t, ok)
		used[p] = true
		got = append(got, p)
	}
	// The newest pair first, each pair once, then the newest again.
	require.Equal(t, [][2]string{{"b", "c"}, {"a", "c"}, {"a", "b"}, {"b", "c"}}, got)
	// A new clip makes new pairs again.
	p, _ := pickClips(append(clips, "d"), used)
	require.Equal(t, [2]string{"c", "d"}, p)
}

func TestRenderTenantAndRepeats(t *testing.T) {
	t.Parallel()
	clips := [][]string{{"a", "b"}, {"c"}, {}, {"d", "e", "f"}}
	for _, c := range []struct{ turn, want int }{{0, 0}, {1, 3}, {2, 3}, {3, 3}} {
		got, ok := chooseTenant(c.turn, clips)
		require.True(t, ok)
		require.Equal(t, c.want, got, "turn %d", c.turn)
	}
	_, ok := chooseTenant(1, [][]string{{"a"}, {}})
	require.False(t, ok, "no tenant has two clips yet")

	var repeats []int
	for i := range 12 {
		if j := repeatOf(i); j >= 0 {
			require.Equal(t, i-2, j)
			repeats = append(repeats, i)
		}
	}
	require.Equal(t, []int{2, 8}, repeats, "two repeats in the long run's twelve renders")
	require.Equal(t, 3, defaultRenders(40))
	t0 := time.Now()
	require.Equal(t, t0.Add(20*time.Second), nextDue(t0, t0.Add(time.Second), 20*time.Second), "on time: the next slot")
	require.Equal(t, t0.Add(100*time.Second), nextDue(t0, t0.Add(90*time.Second), 20*time.Second), "late: half a gap later")
	require.Equal(t, 12, defaultRenders(300))
}

// TestOneRunPerBroker: a second run on the same broker waits for the
// first to end; a run on another broker does not.
func TestOneRunPerBroker(t *testing.T) {
	t.Parallel()
	dir, endpoint := t.TempDir(), "127.0.0.1:8081"
	unlock, err := lockBroker(t.Context(), dir, endpoint)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), 1500*time.Millisecond)
	defer cancel()
	_, err = lockBroker(ctx, dir, endpoint)
	require.ErrorIs(t, err, context.DeadlineExceeded, "the second run waited")
	other, err := lockBroker(t.Context(), dir, "127.0.0.1:9081")
	require.NoError(t, err)
	other()
	unlock()
	again, err := lockBroker(t.Context(), dir, endpoint)
	require.NoError(t, err, "free once the first run ended")
	again()
}

// TestProxyRecoveryCheck: recoveries logged after a restart are the
// consumers' deaf time after it; a group is receiving again with its first
// consumer. A group later than maxDeafAfterRestart, or a consumer later
// than maxConsumerDeaf, breaks its invariant and is named; lines of other
// processes and the client's own are ignored. A consumer is receiving
// again from when its first working receive was sent (listening_since),
// not when that long poll ended, and that recovery belongs to the last
// restart that began before it.
func TestProxyRecoveryCheck(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "logs"), 0o755))
	back := time.Date(2026, 12, 2, 10, 0, 30, 0, time.UTC)
	polled := func(sent, answered time.Duration, group, topic string) string {
		return fmt.Sprintf(`{"time":%q,"level":"INFO","msg":"rocketmq consumer receiving again","consumer_group":%q,"topic":%q,"failures":4,"listening_since":%q,"deaf_for":1}`,
			back.Add(answered).Format(time.RFC3339Nano), group, topic, back.Add(sent).Format(time.RFC3339Nano))
	}
	line := func(at time.Duration, group string) string { return polled(at, at, group, "t") }
	write := func(name string, lines ...string) {
		require.NoError(t, os.WriteFile(filepath.Join(dir, "logs", name), []byte(strings.Join(lines, "\n")+"\n"), 0o644))
	}
	write("source-a.log", "2026-12-02T10:00:31Z ERROR client.go:481 failed to send heartbeat", line(2*time.Second, "a"), line(9*time.Minute, "a"))
	write("source-b.log", line(3*time.Second, "b"), polled(4*time.Second, 24*time.Second, "idle", "t"),
		polled(12*time.Second, 12*time.Second, "b", "delay")) // busy: b's other consumer took its workers
	w := &world{runDir: dir}
	restart := proxyRestart{Began: back.Add(-20 * time.Second), Back: back}
	check := func(restarts ...proxyRestart) *report {
		r := &report{ProxyRestarts: restarts}
		require.NoError(t, w.checkProxyRecovery(t.Context(), r))
		require.Len(t, r.Invariants, 2)
		return r
	}
	r := check(restart)
	require.True(t, r.Invariants[0].Held, r.Invariants[0].Detail)
	require.True(t, r.Invariants[1].Held, r.Invariants[1].Detail)
	require.Equal(t, map[string]time.Duration{"a/t": 2 * time.Second, "b/t": 3 * time.Second, "b/delay": 12 * time.Second, "idle/t": 4 * time.Second},
		r.ProxyRestarts[0].Deaf)
	require.Equal(t, map[string]time.Duration{"a": 2 * time.Second, "b": 3 * time.Second, "idle": 4 * time.Second}, r.ProxyRestarts[0].groups())

	// A second restart 10 s after the first was back: what listened again
	// after it began is its recovery, not the first's.
	second := proxyRestart{Began: back.Add(10 * time.Second), Back: back.Add(11 * time.Second)}
	r = check(restart, second)
	require.Equal(t, map[string]time.Duration{"a/t": 2 * time.Second, "b/t": 3 * time.Second, "idle/t": 4 * time.Second}, r.ProxyRestarts[0].Deaf)
	require.Equal(t, map[string]time.Duration{"b/delay": time.Second}, r.ProxyRestarts[1].Deaf)

	write("source-c.log", line(maxDeafAfterRestart+time.Second, "c"))
	r = check(restart)
	require.False(t, r.Invariants[0].Held)
	require.Contains(t, r.Invariants[0].Detail, "c 6s after the restart")
	require.True(t, r.Invariants[1].Held, r.Invariants[1].Detail)

	write("source-c.log", line(time.Second, "c"), polled(maxConsumerDeaf+time.Second, maxConsumerDeaf+time.Second, "c", "delay"))
	r = check(restart)
	require.True(t, r.Invariants[0].Held, r.Invariants[0].Detail)
	require.False(t, r.Invariants[1].Held)
	require.Contains(t, r.Invariants[1].Detail, "c/delay 31s after the restart")

	// The same late consumer, its process stopped by the faulter for 80 s
	// meanwhile (it logs its recovery only once it runs again): the time
	// stopped is not deaf. Another process's pause changes nothing.
	write("source-c.log", line(time.Second, "c"), polled(100*time.Second, 101*time.Second, "c", "delay"))
	r = &report{ProxyRestarts: []proxyRestart{restart}, Pauses: []pause{{Proc: "source-c", From: back.Add(10 * time.Second), To: back.Add(90 * time.Second)}}}
	require.NoError(t, w.checkProxyRecovery(t.Context(), r))
	require.True(t, r.Invariants[1].Held, r.Invariants[1].Detail)
	require.Equal(t, 20*time.Second, r.ProxyRestarts[0].Deaf["c/delay"])
	r = &report{ProxyRestarts: []proxyRestart{restart}, Pauses: []pause{{Proc: "source-b", From: back.Add(10 * time.Second), To: back.Add(90 * time.Second)}}}
	require.NoError(t, w.checkProxyRecovery(t.Context(), r))
	require.False(t, r.Invariants[1].Held)
	require.Contains(t, r.Invariants[1].Detail, "c/delay 1m40s after the restart")
}

func TestHandedOverCheck(t *testing.T) {
	check := func(handedOver map[string]int) invariant {
		r := &report{}
		(&world{handedOver: handedOver}).checkHandedOver(r)
		require.Len(t, r.Invariants, 1)
		return r.Invariants[0]
	}
	require.True(t, check(map[string]int{}).Held)
	require.True(t, check(map[string]int{"runway": 3}).Held)
	got := check(map[string]int{"runway": 3, "replicate": 1})
	require.False(t, got.Held)
	require.Contains(t, got.Detail, "1 at replicate")
}

// TestCaptureCheck: a capture the settle stage made of a reservation taken
// at the task's price holds; a reservation off the price, a capture off its
// reservation, one of a reservation not CAPTURED and one naming no
// reservation break the invariant, each named.
func TestCaptureCheck(t *testing.T) {
	t.Parallel()
	pool := dbtest.TestSchema(t)
	// stagetest's task is 2 s of model "m": 20 credits at the default price.
	price := billing.DefaultPrice.Of("m", 2)
	cur := stagetest.NewTask(t, pool, &stagetest.TaskOpts{Reserved: price})
	require.NoError(t, pgx.BeginFunc(t.Context(), pool, func(tx pgx.Tx) error {
		_, err := billing.Capture(t.Context(), tx, cur.ID)
		return err
	}))
	check := func(caps ...capture) invariant {
		r := &report{}
		addCaptures(r, caps)
		require.Len(t, r.Invariants, 1)
		return r.Invariants[0]
	}
	caps, err := readCaptures(t.Context(), pool)
	require.NoError(t, err)
	require.Len(t, caps, 1)
	got := check(caps...)
	require.True(t, got.Held, got.Detail)
	require.Equal(t, capture{Reservation: caps[0].Reservation, Amount: -price, Found: true, Reserved: price, Status: billing.Captured,
		Payer: "task " + cur.ID.String(), Price: price}, caps[0])

	good := caps[0]
	render := capture{Reservation: "r2", Amount: -6, Found: true, Reserved: 6, Status: billing.Captured, Payer: "render x",
		Price: billing.DefaultRenderPrice.Of("1080p30-h264", 2_500_000)}
	require.True(t, check(good, render).Held, "a render's started seconds priced: %s", check(good, render).Detail)
	for _, c := range []struct {
		name string
		edit func(*capture)
		want string
	}{
		{"reserved off the price", func(c *capture) { c.Reserved, c.Amount = price+5, -price-5 }, fmt.Sprintf("reserved %d, its price is %d", price+5, price)},
		{"captured off the reservation", func(c *capture) { c.Amount = -price + 1 }, fmt.Sprintf("captured %d of a reservation of %d", price-1, price)},
		{"reservation not captured", func(c *capture) { c.Status = billing.Released }, "its reservation RELEASED"},
		{"no reservation", func(c *capture) { c.Found, c.Payer = false, "" }, "names no reservation"},
	} {
		bad := good
		c.edit(&bad)
		got := check(render, bad)
		require.False(t, got.Held, c.name)
		require.Contains(t, got.Detail, c.want, c.name)
	}
}

// TestReviewerRecordCheck: approvals and rejections the reviewer simulator
// gave hold, also after a lost answer was asked again; an approval or a
// success it never gave, and a rejection it never gave, break the
// invariant.
func TestReviewerRecordCheck(t *testing.T) {
	t.Parallel()
	check := func(tasks []reviewed, decided map[string][]string) invariant {
		r := &report{}
		addReviewer(r, tasks, decided)
		require.Len(t, r.Invariants, 1)
		return r.Invariants[0]
	}
	tasks := []reviewed{
		{Task: "a", Status: "SUCCEEDED", Review: "APPROVED"},
		{Task: "b", Status: "FAILED", ErrorCode: task.ErrContentRejected, Review: "REJECTED"},
		{Task: "c", Status: "FAILED", ErrorCode: "provider.job_failed"},
		{Task: "d", Status: "CANCELED_WITH_OUTPUT", Review: "APPROVED"},
	}
	decided := map[string][]string{"a": {reviewsim.Approve}, "b": {reviewsim.Approve, reviewsim.Reject}, "d": {reviewsim.Approve}}
	got := check(tasks, decided)
	require.True(t, got.Held, got.Detail)

	got = check(tasks, map[string][]string{"a": {reviewsim.Reject}, "b": {reviewsim.Reject}, "d": {reviewsim.Approve}})
	require.False(t, got.Held, "a success the reviewer rejected")
	require.Contains(t, got.Detail, "task a SUCCEEDED, review APPROVED: the reviewer answered [reject]")

	got = check([]reviewed{{Task: "e", Status: "SUCCEEDED", Review: "APPROVED"}}, map[string][]string{})
	require.False(t, got.Held, "an approval without a call")
	require.Contains(t, got.Detail, "task e SUCCEEDED, review APPROVED: the reviewer answered []")

	got = check(tasks, map[string][]string{"a": {reviewsim.Approve}, "b": {reviewsim.Approve}, "d": {reviewsim.Approve}})
	require.False(t, got.Held, "a rejection the reviewer never gave")
	require.Contains(t, got.Detail, "task b FAILED review.content_rejected, review REJECTED: the reviewer answered [approve]")
}
