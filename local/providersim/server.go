package providersim

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	mathrand "math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/aivedio/pipeline/shared/provider/runway"
)

// errClosed is the cause of a deliberate Close, telling it from the
// caller's ctx ending.
var errClosed = errors.New("provider simulator closed")

// Server is the provider simulator. Create it with [New], run it with
// [Server.Start], stop it with [Server.Close].
type Server struct {
	opts       Options
	log        *slog.Logger
	hookKey    []byte
	hookClient *http.Client
	hooks      chan delivery
	wake       chan struct{}
	media      *media

	// baseURL is set by Start before anything reads it.
	baseURL string

	mu      sync.Mutex
	rng     *mathrand.Rand
	seq     int64
	jobs    map[string]*job
	byKey   map[string]*job
	due     dueHeap
	stats   Stats
	state   *state // nil: jobs in memory only
	started bool
	cancel  context.CancelCauseFunc

	wg sync.WaitGroup
}

// New checks opts, fills the zero counts from [DefaultOptions] and returns
// a simulator that is not yet listening. A nil logger discards.
func New(opts Options, logger *slog.Logger) (*Server, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	def := DefaultOptions()
	fill := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	fill(&opts.MaxJobs, def.MaxJobs)
	fill(&opts.PageSize, def.PageSize)
	fill(&opts.WebhookWorkers, def.WebhookWorkers)
	fill(&opts.WebhookQueue, def.WebhookQueue)
	fill(&opts.WebhookAttempts, def.WebhookAttempts)
	fill(&opts.MaxOutputSide, def.MaxOutputSide)
	if opts.WebhookBackoff <= 0 {
		opts.WebhookBackoff = def.WebhookBackoff
	}
	if opts.OutputTTL == 0 {
		opts.OutputTTL = def.OutputTTL
	}
	if opts.DropMode == "" {
		opts.DropMode = DropClose
	}
	if opts.FFmpegPath == "" {
		opts.FFmpegPath = def.FFmpegPath
	}
	if opts.RunwayVersion == "" {
		opts.RunwayVersion = def.RunwayVersion
	}
	if opts.ThrottleFor == 0 {
		opts.ThrottleFor = def.ThrottleFor
	}
	if opts.ClientRequestIDParam == "" {
		opts.ClientRequestIDParam = def.ClientRequestIDParam
	}
	if opts.CacheDir == "" {
		opts.CacheDir = DefaultCacheDir()
	}
	ffmpeg, err := exec.LookPath(opts.FFmpegPath)
	if err != nil {
		return nil, fmt.Errorf("provider simulator needs ffmpeg: %w", err)
	}
	if err := checkWritable(opts.CacheDir); err != nil {
		return nil, err
	}
	if opts.WebhookSecret == "" {
		key := make([]byte, 32)
		_, _ = rand.Read(key)
		opts.WebhookSecret = "whsec_" + base64.StdEncoding.EncodeToString(key)
	}
	hookKey, err := decodeSecret(opts.WebhookSecret)
	if err != nil {
		return nil, err
	}
	seed := opts.Seed
	if seed == 0 {
		seed = time.Now().UnixNano()
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	transport := http.DefaultTransport.(*http.Transport).Clone()
	s := &Server{
		opts:    opts,
		log:     logger,
		hookKey: hookKey,
		hookClient: &http.Client{
			Transport: transport,
			// Replicate does not follow redirects when it sends webhooks.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
		hooks: make(chan delivery, opts.WebhookQueue),
		wake:  make(chan struct{}, 1),
		media: &media{ffmpeg: ffmpeg, dir: opts.CacheDir, entries: map[string]*mediaEntry{}},
		rng:   mathrand.New(mathrand.NewPCG(uint64(seed), uint64(seed)^0x9e3779b97f4a7c15)),
		jobs:  map[string]*job{},
		byKey: map[string]*job{},
		stats: newStats(),
	}
	if opts.StateFile != "" {
		if err := s.loadState(opts.StateFile); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// WebhookSecret returns the secret that signs webhooks, for the client's
// configuration.
func (s *Server) WebhookSecret() string { return s.opts.WebhookSecret }

// Options are the knobs the simulator runs with, defaults and the
// environment applied: what a check reads to know which faults it injects.
func (s *Server) Options() Options { return s.opts }

// JobsWithPrompt returns the ids of the jobs the simulator still holds
// whose request carried prompt, oldest first: what a person finds by
// searching a provider's console for a lost submit.
func (s *Server) JobsWithPrompt(prompt string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var found []*job
	for _, j := range s.jobs {
		if j.prompt == prompt {
			found = append(found, j)
		}
	}
	slices.SortFunc(found, func(a, b *job) int { return cmp.Compare(a.seq, b.seq) })
	ids := make([]string, 0, len(found))
	for _, j := range found {
		ids = append(ids, j.id)
	}
	return ids
}

// Start listens on addr ("127.0.0.1:0" picks a port) and serves until
// Close or until ctx ends. It returns the base URL to give the client.
func (s *Server) Start(ctx context.Context, addr string) (string, error) {
	s.mu.Lock()
	if s.started {
		s.mu.Unlock()
		return "", errors.New("provider simulator already started")
	}
	s.started = true
	s.mu.Unlock()

	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", addr)
	if err != nil {
		s.mu.Lock()
		s.started = false // nothing runs: another address may work
		s.mu.Unlock()
		return "", fmt.Errorf("provider simulator listen: %w", err)
	}
	s.baseURL = "http://" + ln.Addr().String()
	run, cancel := context.WithCancelCause(ctx)
	srv := &http.Server{
		Handler:           s.routes(),
		ReadHeaderTimeout: 10 * time.Second,
		// Requests end with the simulator: a hanging drop, an ffmpeg run.
		BaseContext: func(net.Listener) context.Context { return run },
		ErrorLog:    slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
	}
	s.mu.Lock()
	s.cancel = cancel
	s.mu.Unlock()

	s.wg.Add(3 + s.opts.WebhookWorkers)
	go func() {
		defer s.wg.Done()
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("provider simulator stopped serving", slog.String("error", err.Error()))
		}
	}()
	go func() {
		defer s.wg.Done()
		<-run.Done()
		shutdown, done := context.WithTimeout(context.WithoutCancel(run), 5*time.Second)
		defer done()
		_ = srv.Shutdown(shutdown)
		_ = srv.Close()
	}()
	go func() {
		defer s.wg.Done()
		s.schedule(run)
	}()
	for range s.opts.WebhookWorkers {
		go func() {
			defer s.wg.Done()
			s.deliverLoop(run)
		}()
	}
	s.log.InfoContext(ctx, "provider simulator listening", slog.String("addr", ln.Addr().String()))
	return s.baseURL, nil
}

// Close stops serving, ends every goroutine Start began and waits for
// them. It is safe before Start and more than once.
func (s *Server) Close() error {
	s.mu.Lock()
	cancel := s.cancel
	s.mu.Unlock()
	if cancel == nil {
		s.closeState()
		return nil
	}
	cancel(errClosed)
	s.wg.Wait()
	s.hookClient.CloseIdleConnections()
	s.closeState()
	return nil
}

// routes is the simulator's API: Replicate's prediction endpoints and
// webhook secret, Runway's task endpoints, output files and the stats.
func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/predictions", s.api(s.create))
	mux.HandleFunc("POST /v1/models/{owner}/{name}/predictions", s.api(s.create))
	mux.HandleFunc("GET /v1/predictions", s.api(s.list))
	mux.HandleFunc("GET /v1/predictions/{id}", s.api(s.get))
	mux.HandleFunc("POST /v1/predictions/{id}/cancel", s.api(s.cancelJob))
	mux.HandleFunc("GET /v1/webhooks/default/secret", s.api(s.secret))
	mux.HandleFunc("POST /v1/text_to_video", s.runwayAPI(s.createTask))
	mux.HandleFunc("GET /v1/tasks/{id}", s.runwayAPI(s.getTask))
	mux.HandleFunc("DELETE /v1/tasks/{id}", s.runwayAPI(s.deleteTask))
	mux.HandleFunc("GET /files/{id}/output.mp4", s.file)
	mux.HandleFunc("GET /sim/stats", s.statsHandler)
	return mux
}

// api guards Replicate's /v1 endpoints: the token first, then the
// injected 429s and 503s, which stand for an edge in front of the API.
func (s *Server) api(h http.HandlerFunc) http.HandlerFunc {
	return s.guard(h, func(w http.ResponseWriter, status int, title, detail string) {
		writeProblem(w, status, title, detail)
	})
}

// runwayAPI guards Runway's endpoints like api, with Runway's error
// bodies, and refuses a request without the X-Runway-Version the
// simulator speaks, as Runway does.
func (s *Server) runwayAPI(h http.HandlerFunc) http.HandlerFunc {
	versioned := func(w http.ResponseWriter, r *http.Request) {
		if v := r.Header.Get(runway.VersionHeader); v != s.opts.RunwayVersion {
			writeRunwayError(w, http.StatusBadRequest, fmt.Sprintf("%s must be %s", runway.VersionHeader, s.opts.RunwayVersion), "")
			return
		}
		h(w, r)
	}
	return s.guard(versioned, func(w http.ResponseWriter, status int, _, detail string) {
		writeRunwayError(w, status, detail, "")
	})
}

// guard checks the token and injects the 429s and 503s before h, writing
// refusals with fail in the format's own error body.
func (s *Server) guard(h http.HandlerFunc, fail func(w http.ResponseWriter, status int, title, detail string)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if s.opts.APIToken != "" && subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), []byte("Bearer "+s.opts.APIToken)) != 1 {
			fail(w, http.StatusUnauthorized, "Unauthenticated", "You did not pass a valid authentication token")
			return
		}
		s.mu.Lock()
		limited := s.rollLocked(s.opts.Rate429)
		failing := !limited && s.rollLocked(s.opts.Rate5xx)
		if limited {
			s.stats.Faults.RateLimited++
		}
		if failing {
			s.stats.Faults.ServerErrors++
		}
		s.mu.Unlock()
		switch {
		case limited:
			secs := int((s.opts.RetryAfter + time.Second - 1) / time.Second)
			w.Header().Set("Retry-After", fmt.Sprint(secs))
			fail(w, http.StatusTooManyRequests, "", fmt.Sprintf("Request was throttled. Your rate limit resets in ~%ds.", secs))
		case failing:
			fail(w, http.StatusServiceUnavailable, "Service Unavailable", "simulated outage")
		default:
			h(w, r)
		}
	}
}

// rollLocked draws whether an event of probability rate happens. Rates of
// 0 and 1 draw nothing, so they leave the sequence of other draws alone.
func (s *Server) rollLocked(rate float64) bool {
	switch {
	case rate <= 0:
		return false
	case rate >= 1:
		return true
	}
	return s.rng.Float64() < rate
}

// DefaultCacheDir is the cache of generated clips when Options.CacheDir is
// empty: a folder of the temporary directory per user, since a folder one
// user made (`make test` as root) is not writable by another (`make run` as
// nobody).
func DefaultCacheDir() string {
	return filepath.Join(os.TempDir(), "aivedio-providersim-"+strconv.Itoa(os.Getuid()))
}

// checkWritable makes dir and proves this process can write there, so that
// a cache it cannot use fails at start with its name, not at the first
// download.
func checkWritable(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create provider simulator cache dir: %w", err)
	}
	f, err := os.CreateTemp(dir, ".probe-*")
	if err != nil {
		return fmt.Errorf("provider simulator cache dir %s is not writable by this user (set PROVIDERSIM_CACHE_DIR to a folder of its own): %w", dir, err)
	}
	f.Close()
	return os.Remove(f.Name())
}
