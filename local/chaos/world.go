package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/aivedio/pipeline/local/reviewsim"
	"github.com/aivedio/pipeline/migrations"
	"github.com/aivedio/pipeline/shared/blob"
	"github.com/aivedio/pipeline/shared/config"
	"github.com/aivedio/pipeline/shared/tenant"
)

// The journey settings of a chaos run: the production defaults scaled
// down, so that what the reconciler rescues is rescued within the run.
var chaosJourney = map[string]string{
	"POLL_FIRST_DELAY":     "1s",
	"POLL_MAX_INTERVAL":    "3s",
	"GENERATION_MAX_WAIT":  "5m",
	"SUBMIT_RETRY_BASE":    "500ms",
	"SUBMIT_RETRY_MAX":     "5s",
	"SUBMIT_MAX_RETRIES":   "200",
	"RECONCILE_DELAY":      "2s",
	"RECONCILE_MAX_ROUNDS": "10",
	"RECONCILE_SCAN_GRACE": "5s",
	// Above the worst backlog a stage builds on two cores (the long run's
	// transcode queue reaches about two minutes): a step not taken within
	// it counts as lost, and three such rounds hand the task to a person.
	"RECONCILE_STUCK_AFTER": "3m",
	// A render that truly stopped fails within the run's drain.
	"RECONCILE_GIVE_UP_AFTER": "6m",
	"FETCH_RETRY_BASE":        "1s",
	"FETCH_RETRY_MAX":         "5s",
	"FETCH_MAX_WAIT":          "15m",
	"OUTBOX_STALE_AFTER":      "1m",
	"SLOT_LEASE":              "5m",
	"PROVIDER_TIMEOUT":        "5s",
	"PROVIDER_BREAKER_OPEN":   "3s",
	// Renders in two chunks (a 3.5 s timeline), and a claim a killed or
	// paused render function held runs out within the run.
	"RENDER_CHUNK": "2s",
	"RENDER_LEASE": "20s",
}

// The adapters' delivery settings: a pause longer than a source's
// invisible time makes the broker hand a message out again while its
// first receiver is frozen.
const (
	sourceInvisible = 20 * time.Second
	handlerTimeout  = 15 * time.Second
	// The ffmpeg stages get longer budgets, as their Knative sources do
	// (knative/base/config.yaml): on two cores under a full run a render
	// chunk or a review's frames can take longer than handlerTimeout, and
	// a delivery cut short throws its work away to do it again.
	mediaInvisible = 75 * time.Second
	mediaTimeout   = time.Minute
	reconcileTick  = 3 * time.Second
	creditsEach    = 1_000_000
)

// world is everything one run starts and checks.
type world struct {
	o        options
	runDir   string
	database string // the run's own database
	adminURL string // the services' database, where the run's is created
	dbURL    string
	pool     *pgxpool.Pool
	// handedOver counts the lost submits actAsOperator found in
	// NEEDS_ATTENTION, by provider.
	handedOver map[string]int
	blob       *blob.Store
	bucket     string
	// providers are Replicate's and Runway's simulators, in routing order.
	providers    []*simProvider
	reviewer     *reviewsim.Server
	reviewURL    string
	reviewOutage atomic.Bool
	apiURL       string
	funcURLs     map[string]string
	procs        []*proc
	script       string // services.sh
	keys         []string
	tenants      []string

	mu      sync.Mutex
	tasks   map[string]string // idempotency key -> task id
	renders map[string]string // idempotency key -> render id

	ticker context.CancelFunc
	keep   bool
	closed []func()
}

func newWorld(ctx context.Context, o options) (*world, error) {
	w := &world{o: o, funcURLs: map[string]string{}, tasks: map[string]string{}, renders: map[string]string{}, handedOver: map[string]int{}}
	ok := false
	defer func() {
		if !ok {
			w.close()
		}
	}()
	var err error
	for _, v := range []string{"DATABASE_URL", "REDIS_URL", "ROCKETMQ_ENDPOINT", "S3_ENDPOINT"} {
		if os.Getenv(v) == "" {
			return nil, fmt.Errorf("%s is not set: start the services (make services-up) and source their env (source /tmp/aivedio-services/env)", v)
		}
	}
	w.script = os.Getenv("AIVEDIO_SERVICES_SCRIPT")
	if w.script == "" {
		w.script = "local/services/services.sh"
	}
	if _, err := os.Stat(w.script); err != nil {
		return nil, fmt.Errorf("services script (AIVEDIO_SERVICES_SCRIPT): %w", err)
	}
	w.runDir = o.RunDir
	if w.runDir == "" {
		if w.runDir, err = os.MkdirTemp("", "aivedio-chaos-"); err != nil {
			return nil, err
		}
	}
	if err := os.MkdirAll(filepath.Join(w.runDir, "logs"), 0o755); err != nil {
		return nil, err
	}
	if err := w.build(ctx); err != nil {
		return nil, err
	}
	if err := w.createDatabase(ctx); err != nil {
		return nil, err
	}
	if err := w.createBucket(ctx); err != nil {
		return nil, err
	}
	if err := w.startProviders(ctx); err != nil {
		return nil, err
	}
	if err := w.startReviewer(ctx); err != nil {
		return nil, err
	}
	if err := w.createTenants(ctx); err != nil {
		return nil, err
	}
	ok = true
	return w, nil
}

// build compiles the three binaries every process runs.
func (w *world) build(ctx context.Context) error {
	for _, b := range []struct{ out, pkg string }{
		{"api", "./functions/cmd/api"}, {"function", "./functions/cmd/function"}, {"adapter", "./adapter"},
	} {
		cmd := exec.CommandContext(ctx, "go", "build", "-o", filepath.Join(w.runDir, "bin", b.out), b.pkg)
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("go build %s: %w\n%s", b.pkg, err, out)
		}
	}
	return nil
}

// createDatabase makes the run's own database and migrates it.
func (w *world) createDatabase(ctx context.Context) error {
	w.adminURL = os.Getenv("DATABASE_URL")
	w.database = fmt.Sprintf("chaos_%d_%d", w.o.Seed, os.Getpid())
	conn, err := pgx.Connect(ctx, w.adminURL)
	if err != nil {
		return fmt.Errorf("connect to PostgreSQL: %w", err)
	}
	defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{w.database}.Sanitize()); err != nil {
		return fmt.Errorf("create database %s: %w", w.database, err)
	}
	w.closed = append(w.closed, w.dropDatabase)
	u, err := url.Parse(w.adminURL)
	if err != nil {
		return err
	}
	u.Path = "/" + w.database
	w.dbURL = u.String()
	if err := migrations.Up(ctx, w.dbURL); err != nil {
		return err
	}
	cfg, err := pgxpool.ParseConfig(w.dbURL)
	if err != nil {
		return err
	}
	cfg.MaxConns = 8
	if w.pool, err = pgxpool.NewWithConfig(ctx, cfg); err != nil {
		return err
	}
	w.closed = append(w.closed, w.pool.Close)
	return nil
}

func (w *world) dropDatabase() {
	if w.keep {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, w.adminURL)
	if err != nil {
		return
	}
	defer func() { _ = conn.Close(ctx) }()
	_, _ = conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{w.database}.Sanitize()+" WITH (FORCE)")
}

func (w *world) createBucket(ctx context.Context) error {
	w.bucket = fmt.Sprintf("chaos-%d-%d", w.o.Seed, os.Getpid())
	cfg := config.S3{Endpoint: os.Getenv("S3_ENDPOINT"), Region: envOr("S3_REGION", "us-east-1"), Bucket: w.bucket,
		AccessKeyID: os.Getenv("S3_ACCESS_KEY_ID"), SecretAccessKey: os.Getenv("S3_SECRET_ACCESS_KEY")}
	var err error
	if w.blob, err = blob.New(ctx, cfg); err != nil {
		return err
	}
	w.closed = append(w.closed, w.emptyBucket)
	return w.blob.EnsureBucket(ctx)
}

// emptyBucket deletes the run's objects unless the run is kept.
func (w *world) emptyBucket() {
	if w.keep {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	keys, err := w.blob.List(ctx, "")
	if err != nil {
		return
	}
	for _, k := range keys {
		_ = w.blob.Delete(ctx, k)
	}
}

func (w *world) createTenants(ctx context.Context) error {
	for i := range max(w.o.Tenants, 1) {
		err := pgx.BeginFunc(ctx, w.pool, func(tx pgx.Tx) error {
			c, err := tenant.Create(ctx, tx, tenant.NewTenant{Name: fmt.Sprintf("chaos-%d", i), Credits: creditsEach, Priority: i % 10}, tenant.RoleTenant)
			w.keys = append(w.keys, c.Key)
			w.tenants = append(w.tenants, c.TenantID.String())
			return err
		})
		if err != nil {
			return fmt.Errorf("create tenant: %w", err)
		}
	}
	return nil
}

// freePort picks a port nobody listens on, below the kernel's ephemeral
// range: a port the kernel picks for ":0" comes from the range outgoing
// connections take theirs from, and with the hundreds of connections a run
// keeps open, one can take it before the process it was meant for binds.
// A port is handed out once per run.
func freePort() (int, error) {
	const lo = 20000
	hi := ephemeralStart()
	if hi-lo < 1000 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		defer func() { _ = ln.Close() }()
		return ln.Addr().(*net.TCPAddr).Port, nil
	}
	handedOut.Lock()
	defer handedOut.Unlock()
	for range 500 {
		port := lo + rand.IntN(hi-lo)
		if handedOut.ports[port] {
			continue
		}
		ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			continue
		}
		_ = ln.Close()
		handedOut.ports[port] = true
		return port, nil
	}
	return 0, fmt.Errorf("no free port between %d and %d", lo, hi)
}

var handedOut = struct {
	sync.Mutex
	ports map[int]bool
}{ports: map[int]bool{}}

// ephemeralStart is the first port of the kernel's ephemeral range.
func ephemeralStart() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	var start, end int
	if _, err := fmt.Sscan(string(b), &start, &end); err != nil {
		return 32768
	}
	return start
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// baseEnv is what every process gets: the services, the run's database
// and bucket, the provider, the journey settings.
func (w *world) baseEnv() []string {
	redisURL, _ := url.Parse(os.Getenv("REDIS_URL"))
	redisURL.Path = "/5" // a database of its own on the shared Redis
	env := []string{
		"PATH=" + os.Getenv("PATH"), "HOME=" + envOr("HOME", "/tmp"),
		"DATABASE_URL=" + w.dbURL, "DATABASE_MAX_CONNS=3",
		"REDIS_URL=" + redisURL.String(),
		"ROCKETMQ_ENDPOINT=" + os.Getenv("ROCKETMQ_ENDPOINT"), "ROCKETMQ_CLIENT_LOG_LEVEL=error",
		"S3_ENDPOINT=" + os.Getenv("S3_ENDPOINT"), "S3_REGION=" + envOr("S3_REGION", "us-east-1"), "S3_BUCKET=" + w.bucket,
		"S3_ACCESS_KEY_ID=" + os.Getenv("S3_ACCESS_KEY_ID"), "S3_SECRET_ACCESS_KEY=" + os.Getenv("S3_SECRET_ACCESS_KEY"),
		"FFMPEG_PATH=" + envOr("FFMPEG_PATH", "ffmpeg"), "FFPROBE_PATH=" + envOr("FFPROBE_PATH", "ffprobe"),
		"LOG_FORMAT=json",
	}
	env = append(append(env, w.providerEnv()...), w.reviewEnv()...)
	for k, v := range chaosJourney {
		env = append(env, k+"="+v)
	}
	return env
}

func (w *world) close() {
	w.stopAll()
	for i := len(w.closed) - 1; i >= 0; i-- {
		w.closed[i]()
	}
	w.closed = nil
	if !w.keep && w.o.RunDir == "" && w.runDir != "" {
		_ = os.RemoveAll(w.runDir)
	}
}

// services runs a command of services.sh (restart-proxy, ...).
func (w *world) services(ctx context.Context, command string) error {
	cmd := exec.CommandContext(ctx, "bash", w.script, command)
	cmd.Env = os.Environ()
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("services.sh %s: %w\n%s", command, err, out)
	}
	return nil
}
