package servicetest

import (
	"bufio"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Redis is a redis-server process of one test's own, without persistence:
// unlike the shared Redis, a test may [Redis.Restart] it and lose every
// key, as a Redis restart in production does. It is stopped in
// tb.Cleanup.
type Redis struct {
	// Addr is its host:port on the loopback; the same across restarts.
	Addr string
	port int
	dir  string
	cmd  *exec.Cmd
}

// redisStartTimeout bounds one start until it answers PING.
const redisStartTimeout = 10 * time.Second

// StartRedis starts a private redis-server on a free loopback port. A
// missing redis-server binary fails the test under `make test` and CI (the
// services script installs it) and skips it elsewhere.
func StartRedis(tb testing.TB) *Redis {
	tb.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		if Required() {
			tb.Fatalf("redis-server is required but not installed: `make services-up` installs it")
		}
		tb.Skip("redis-server not installed; `make services-up` installs it")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("servicetest: find a free port: %v", err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	if err := ln.Close(); err != nil {
		tb.Fatalf("servicetest: free port %d: %v", port, err)
	}
	r := &Redis{Addr: "127.0.0.1:" + strconv.Itoa(port), port: port, dir: tb.TempDir()}
	tb.Cleanup(r.stop)
	r.start(tb)
	return r
}

// URL is its REDIS_URL.
func (r *Redis) URL() string { return "redis://" + r.Addr + "/0" }

// Restart kills the server (SIGKILL: nothing is saved, and it has no
// persistence anyway) and starts an empty one on the same port. Clients
// reconnect by themselves.
func (r *Redis) Restart(tb testing.TB) {
	tb.Helper()
	r.stop()
	r.start(tb)
}

func (r *Redis) start(tb testing.TB) {
	tb.Helper()
	cmd := exec.Command("redis-server", "--port", strconv.Itoa(r.port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", r.dir, "--daemonize", "no", "--loglevel", "warning")
	if err := cmd.Start(); err != nil {
		tb.Fatalf("servicetest: start redis-server: %v", err)
	}
	r.cmd = cmd
	deadline := time.Now().Add(redisStartTimeout)
	for {
		if ping(r.Addr) {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("servicetest: redis-server on %s did not answer PING within %s", r.Addr, redisStartTimeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (r *Redis) stop() {
	if r.cmd == nil {
		return
	}
	_ = r.cmd.Process.Kill()
	_ = r.cmd.Wait() // "signal: killed" is what we asked for
	r.cmd = nil
}

// ping reports whether a Redis at addr answers PING.
func ping(addr string) bool {
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return false
	}
	defer func() { _ = conn.Close() }()
	_ = conn.SetDeadline(time.Now().Add(time.Second))
	if _, err := conn.Write([]byte("PING\r\n")); err != nil {
		return false
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	return err == nil && strings.HasPrefix(line, "+PONG")
}
