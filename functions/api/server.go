package api

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"

	"github.com/aivedio/pipeline/shared/billing"
	"github.com/aivedio/pipeline/shared/blob"
	"github.com/aivedio/pipeline/shared/config"
	"github.com/aivedio/pipeline/shared/replay"
	"github.com/aivedio/pipeline/shared/task"
)

// Presigner hands out short-lived download URLs, served as attachments;
// *blob.Store is one.
type Presigner interface {
	PresignDownload(ctx context.Context, key string, ttl time.Duration, d blob.Download) (string, error)
}

// Options are what a Server needs.
type Options struct {
	Pool *pgxpool.Pool
	// Redis carries the live view: the state changes the notify stage
	// publishes, which feed GET /v1/events, and the progress of running
	// tasks, which GET /v1/generations/{id} reports.
	Redis redis.UniversalClient
	// Blob presigns output downloads. Without one, outputs are listed with
	// no download URL.
	Blob Presigner
	// Uploads takes the files of the Asset API; without one, uploads
	// answer 503.
	Uploads UploadStore
	// Callbacks verify provider callbacks, one per provider name.
	Callbacks []CallbackParser
	Limits    config.API
	// Models are the model names a generation may ask for.
	Models []string
	// Price is what a generation reserves; every model must cost more than 0.
	Price billing.Price
	// RenderPrice is what a render reserves; billing.DefaultRenderPrice
	// when zero.
	RenderPrice billing.RenderPrice
	// Replay serves the admin replay endpoints: replay.NewDesk on the same
	// pool with the rules of the build's stages (functions.ReplayRules).
	Replay *replay.Desk
	Logger *slog.Logger
	// Registerer receives the API's metrics; nil registers none.
	Registerer prometheus.Registerer
	// Heartbeat is the interval of the event stream's keep-alive comments;
	// 15 s when zero.
	Heartbeat time.Duration
	// NowFunc is the clock callbacks are checked against; time.Now when nil.
	NowFunc func() time.Time
}

// Server is the public API. Its handler is safe for concurrent use.
type Server struct {
	pool        *pgxpool.Pool
	rdb         redis.UniversalClient
	blob        Presigner
	uploads     UploadStore
	uploadTTL   time.Duration
	callbacks   map[string]CallbackParser
	limits      config.API
	downloadTTL time.Duration
	models      []string // sorted, for lookups and messages
	price       billing.Price
	renderPrice billing.RenderPrice
	replay      *replay.Desk
	log         *slog.Logger
	metrics     *metrics
	hub         *hub
	heartbeat   time.Duration
	now         func() time.Time
	shed        *shedder
	intake      *intake
	handler     http.Handler
}

// dbTimeout bounds the database work of one request.
const dbTimeout = 10 * time.Second

// origin is the cause recorded on every event the API writes.
var origin = task.Origin{Producer: "api"}

// New builds a Server. It panics on a programming error: no pool, no
// Redis, no replay desk, no models, a model that costs nothing, or two
// parsers for one provider.
func New(o Options) *Server {
	if o.Pool == nil {
		panic("api.New: Pool is required")
	}
	if o.Redis == nil {
		panic("api.New: Redis is required")
	}
	if o.Replay == nil {
		panic("api.New: Replay is required")
	}
	if len(o.Models) == 0 {
		panic("api.New: Models must list at least one model")
	}
	for _, m := range o.Models {
		if o.Price.Of(m, 1) <= 0 {
			panic(fmt.Sprintf("api.New: model %q has no positive price per second", m))
		}
	}
	if o.RenderPrice.DefaultPerSecond <= 0 {
		o.RenderPrice = billing.DefaultRenderPrice
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	// Zero limits take config.API's defaults rather than refusing every
	// request.
	if o.Limits.MaxBodyBytes <= 0 {
		o.Limits.MaxBodyBytes = 64 << 10
	}
	if o.Limits.MaxPromptChars <= 0 {
		o.Limits.MaxPromptChars = 4000
	}
	if o.Limits.MaxUploadBytes <= 0 {
		o.Limits.MaxUploadBytes = 2 << 30
	}
	if o.Limits.TenantMaxAssets <= 0 {
		o.Limits.TenantMaxAssets = 100_000
	}
	if o.Limits.TenantMaxBytes <= 0 {
		o.Limits.TenantMaxBytes = 1 << 40
	}
	if o.Heartbeat <= 0 {
		o.Heartbeat = 15 * time.Second
	}
	if o.NowFunc == nil {
		o.NowFunc = time.Now
	}
	s := &Server{
		pool:        o.Pool,
		rdb:         o.Redis,
		blob:        o.Blob,
		uploads:     o.Uploads,
		uploadTTL:   min(cmp.Or(o.Limits.UploadTTL, 15*time.Minute), blob.MaxPresignTTL),
		callbacks:   map[string]CallbackParser{},
		limits:      o.Limits,
		models:      slices.Sorted(slices.Values(o.Models)),
		price:       o.Price,
		renderPrice: o.RenderPrice,
		replay:      o.Replay,
		log:         o.Logger,
		metrics:     newMetrics(o.Registerer),
		heartbeat:   o.Heartbeat,
		now:         o.NowFunc,
		shed:        &shedder{pool: o.Pool, after: o.Limits.ShedAfter, belowPriority: o.Limits.ShedBelow, log: o.Logger},
	}
	s.intake = newIntake(o.Redis, o.Limits.TenantRate, o.Limits.TenantBurst, s.shed, s.log, s.metrics)
	for _, c := range o.Callbacks {
		if _, dup := s.callbacks[c.Name()]; dup {
			panic(fmt.Sprintf("api.New: two callback parsers for provider %q", c.Name()))
		}
		s.callbacks[c.Name()] = c
	}
	// Presigned URLs are bearer credentials: never longer than the blob
	// store allows, whatever the configuration says.
	s.downloadTTL = min(o.Limits.DownloadTTL, blob.MaxPresignTTL)
	if s.downloadTTL <= 0 {
		s.downloadTTL = 15 * time.Minute
	}
	if o.Limits.DownloadTTL > blob.MaxPresignTTL {
		s.log.Warn("API_DOWNLOAD_URL_TTL exceeds the presign limit; using the limit",
			slog.Duration("configured", o.Limits.DownloadTTL), slog.Duration("used", s.downloadTTL))
	}
	s.hub = newHub(o.Redis, s.log.With(slog.String("component", "event_listener")), s.metrics)
	s.handler = s.routes()
	return s
}

// Handler is the API's HTTP handler.
func (s *Server) Handler() http.Handler { return s.handler }

// Run holds the Redis subscription that feeds GET /v1/events until ctx
// ends, subscribing again with backoff after failures; it returns nil
// then. Call it once per Server. Without Run, event streams answer 503.
// When Run returns, every open stream has been closed.
func (s *Server) Run(ctx context.Context) error {
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.shed.run(ctx)
	}()
	defer func() { <-done }()
	return s.hub.run(ctx)
}

func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("POST /v1/generations", s.tenantRoute(s.limited(s.createGeneration)))
	mux.Handle("GET /v1/generations/{id}", s.tenantRoute(s.getGeneration))
	mux.Handle("POST /v1/generations/{id}/cancel", s.tenantRoute(s.cancelGeneration))
	mux.Handle("GET /v1/events", s.tenantRoute(s.streamEvents))
	mux.Handle("POST /v1/assets", s.tenantRoute(s.limited(s.createAsset)))
	mux.Handle("GET /v1/assets", s.tenantRoute(s.listAssets))
	mux.Handle("GET /v1/assets/{id}", s.tenantRoute(s.getAsset))
	mux.Handle("POST /v1/assets/{id}/complete", s.tenantRoute(s.completeAsset))
	mux.Handle("POST /v1/projects", s.tenantRoute(s.createProject))
	mux.Handle("GET /v1/projects/{id}", s.tenantRoute(s.getProject))
	mux.Handle("POST /v1/projects/{id}/revisions", s.tenantRoute(s.createRevision))
	mux.Handle("GET /v1/projects/{id}/revisions/{revision}", s.tenantRoute(s.getRevision))
	mux.Handle("POST /v1/renders", s.tenantRoute(s.limited(s.createRender)))
	mux.Handle("GET /v1/renders/{id}", s.tenantRoute(s.getRender))
	mux.Handle("POST /v1/renders/{id}/cancel", s.tenantRoute(s.cancelRender))
	mux.Handle("POST /v1/provider-callbacks/{provider}", s.publicRoute(s.providerCallback))
	mux.Handle("POST /v1/admin/tenants", s.adminRoute(s.createTenant))
	mux.Handle("GET /v1/admin/quarantine", s.adminRoute(s.listQuarantine))
	mux.Handle("GET /v1/admin/quarantine/{id}", s.adminRoute(s.showQuarantine))
	mux.Handle("POST /v1/admin/quarantine/{id}/discard", s.adminRoute(s.discardQuarantine))
	mux.Handle("POST /v1/admin/replays/plan", s.adminRoute(s.planReplay))
	mux.Handle("GET /v1/admin/replays/{id}", s.adminRoute(s.getReplay))
	mux.Handle("POST /v1/admin/replays/{id}/approve", s.adminRoute(s.approveReplay))
	mux.Handle("POST /v1/admin/replays/{id}/execute", s.adminRoute(s.executeReplay))
	mux.Handle("POST /v1/admin/replays/bulk/plan", s.adminRoute(s.planBulk))
	mux.Handle("POST /v1/admin/replays/bulk/approve", s.adminRoute(s.approveBulk))
	mux.Handle("POST /v1/admin/replays/bulk/execute", s.adminRoute(s.executeBulk))
	mux.Handle("/", s.noRoute(mux))
	// The server span is outermost so the request log and the traceparent
	// answer header name it; the route names it once the mux has matched.
	return otelhttp.NewHandler(s.observe(mux), "api", otelhttp.WithSpanNameFormatter(func(_ string, r *http.Request) string {
		if r.Pattern != "" && r.Pattern != "/" {
			return r.Pattern
		}
		return r.Method + " unmatched" // the catch-all: a 404 or 405
	}))
}

// noRoute answers requests no pattern took, in JSON: 405 when the path
// exists under another method, 404 otherwise.
func (s *Server) noRoute(mux *http.ServeMux) http.Handler {
	return s.publicRoute(func(w http.ResponseWriter, r *http.Request) *apiError {
		var allowed []string
		for _, m := range []string{http.MethodGet, http.MethodPost} {
			probe := r.Clone(r.Context())
			probe.Method = m
			if _, pattern := mux.Handler(probe); pattern != "" && pattern != "/" {
				allowed = append(allowed, m)
			}
		}
		if len(allowed) > 0 {
			e := errorf(http.StatusMethodNotAllowed, CodeMethodNotAllowed, "%s is not supported on %s; use %s",
				r.Method, r.URL.Path, joinOr(allowed))
			e.Header = http.Header{"Allow": {joinComma(allowed)}}
			return e
		}
		return errorf(http.StatusNotFound, CodeNotFound, "no endpoint at %s %s; see the API reference for the routes", r.Method, r.URL.Path)
	})
}

// internal logs a failure of ours and returns the response that hides it.
func (s *Server) internal(ctx context.Context, what string, err error) *apiError {
	s.log.ErrorContext(ctx, what, slog.String("error", err.Error()), slog.String("request_id", requestID(ctx)))
	return errInternal
}
