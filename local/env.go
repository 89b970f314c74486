package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/aivedio/pipeline/functions"
	"github.com/aivedio/pipeline/functions/api"
	"github.com/aivedio/pipeline/local/embedded"
	"github.com/aivedio/pipeline/local/providersim"
	"github.com/aivedio/pipeline/local/reviewsim"
	"github.com/aivedio/pipeline/local/stack"
	"github.com/aivedio/pipeline/shared/billing"
	"github.com/aivedio/pipeline/shared/blob"
	"github.com/aivedio/pipeline/shared/catalog"
	"github.com/aivedio/pipeline/shared/config"
	"github.com/aivedio/pipeline/shared/media"
	"github.com/aivedio/pipeline/shared/quarantine"
	"github.com/aivedio/pipeline/shared/replay"
	"github.com/aivedio/pipeline/shared/slots"
	"github.com/aivedio/pipeline/shared/task"
	"github.com/aivedio/pipeline/shared/telemetry"
	"github.com/aivedio/pipeline/shared/tenant"
)

// services is what `go run ./local` reads from the environment: every
// variable optional, an unset service is embedded.
type services struct {
	DatabaseURL       string `envconfig:"DATABASE_URL"`
	RocketMQEndpoint  string `envconfig:"ROCKETMQ_ENDPOINT"`
	RocketMQAccessKey string `envconfig:"ROCKETMQ_ACCESS_KEY"`
	RocketMQSecretKey string `envconfig:"ROCKETMQ_SECRET_KEY"`
	RedisURL          string `envconfig:"REDIS_URL"`
	Review            bool   `envconfig:"LOCAL_REVIEW" desc:"turn the content review on against the reviewer simulator (as -review does); off by default"`
	LocalDir          string `envconfig:"LOCAL_DATA_DIR" desc:"where go run ./local keeps the state of its embedded services (PostgreSQL, objects, broker queues, simulator jobs); ~/.cache/aivedio/local when empty, /tmp/aivedio-local-data as root"`
	// Embedded without names: envconfig would otherwise prefix their
	// variables with the field name.
	config.S3
	config.Journey
	config.API
	config.Retention
}

// Validate checks the blocks whose values the local run takes from the
// environment; the rest it starts itself when unset.
func (s *services) Validate() error {
	return errors.Join(s.Journey.Validate(), s.API.Validate(), s.Retention.Validate())
}

// options are the command's flags.
type options struct {
	apiAddr   string
	opsAddr   string
	logFormat string
	workers   int
	sim       providersim.Options
	// runway starts a second simulator speaking Runway's API, a second
	// provider every model may fail over to; runwaySim are its knobs
	// (fault-free by default).
	runway    bool
	runwaySim providersim.Options
	// routes is PROVIDER_ROUTES; empty: every model to Replicate, then
	// (with runway) to Runway as gen4.5.
	routes string
	// breakerFailures is PROVIDER_BREAKER_FAILURES; 5 when zero.
	breakerFailures uint32
	// review turns the content review on, against reviewsim.
	review    bool
	reviewSim reviewsim.Options
	logTo     io.Writer // stderr when nil
	// remote is stack.Params.Remote: stages a test runs as processes of
	// their own. No flag: `go run ./local` serves every stage itself.
	remote map[string]string
}

func defaultOptions() options {
	return options{apiAddr: "127.0.0.1:8080", opsAddr: "127.0.0.1:8081", logFormat: "text", workers: config.DefaultSourceWorkers, sim: providersim.DefaultOptions(),
		runway: true, runwaySim: providersim.DefaultOptions(), reviewSim: reviewsim.DefaultOptions()}
}

func (o *options) register(fs *flag.FlagSet) {
	fs.StringVar(&o.apiAddr, "api-addr", o.apiAddr, "listen address of the API")
	fs.StringVar(&o.opsAddr, "ops-addr", o.opsAddr, "listen address of /healthz, /readyz and /metrics (every stage, adapter and the API in one registry)")
	fs.StringVar(&o.logFormat, "log-format", o.logFormat, "text or json")
	fs.IntVar(&o.workers, "workers", o.workers, "concurrent deliveries per consumer group")
	fs.BoolVar(&o.runway, "runway", o.runway, "also run a simulator of Runway's API, the second provider every model fails over to")
	fs.StringVar(&o.routes, "provider-routes", o.routes, "PROVIDER_ROUTES (model=provider[:provider-model],...;...); empty: every model to replicate, then runway:"+localRunwayModel)
	o.sim.RegisterFlags(fs)
	fs.BoolVar(&o.review, "review", o.review, "turn the content review on, against a reviewer simulator on a loopback port (env LOCAL_REVIEW); off by default")
	o.reviewSim.RegisterFlags(fs)
}

// environment is a started pipeline and everything it runs on.
type environment struct {
	apiURL, simURL, devKey string
	opsURL                 string
	models                 []string
	kinds                  []string // what is real and what is embedded, for the banner
	dataDir                string   // LOCAL_DATA_DIR: the embedded services' state
	dbURL, s3URL           string   // of the embedded PostgreSQL and S3 server, for the banner; empty when real
	state                  []string // what the data directory holds, for the banner
	volatile               string   // what it does not hold, and why that is safe
	pool                   *pgxpool.Pool
	blob                   *blob.Store
	sim                    *providersim.Server
	runwaySim              *providersim.Server // nil without -runway
	runwayURL              string
	reviewSim              *reviewsim.Server // nil while review is off
	done                   chan error
	closers                []func()
}

func (e *environment) describe() string { return strings.Join(e.kinds, ", ") }

// describeState lists what the data directory holds.
func (e *environment) describeState() string {
	if len(e.state) == 0 {
		return "nothing: every service is real"
	}
	return strings.Join(e.state, ", ")
}

func (e *environment) close() {
	for i := len(e.closers) - 1; i >= 0; i-- {
		e.closers[i]()
	}
}

// wait returns when ctx ends or the pipeline fails.
func (e *environment) wait(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return nil
	case err := <-e.done:
		return err
	}
}

// start brings up every service (real or embedded) and the pipeline.
func start(ctx context.Context, o options) (*environment, error) {
	var svc services
	if err := config.Load(&svc); err != nil {
		return nil, err
	}
	if err := o.sim.LoadEnv(config.Getenv); err != nil {
		return nil, err
	}
	if err := o.reviewSim.LoadEnv(config.Getenv); err != nil {
		return nil, err
	}
	logger := telemetry.NewLogger(o.logFormat)
	if o.logTo != nil {
		logger = slog.New(slog.NewJSONHandler(o.logTo, nil))
	}
	e := &environment{done: make(chan error, 2), models: svc.API.Models}
	var err error
	ok := false
	defer func() {
		if !ok {
			e.close()
		}
	}()
	ctx, cancel := context.WithCancel(ctx)
	e.closers = append(e.closers, cancel)

	if e.dataDir, err = dataDir(svc); err != nil {
		return nil, err
	}
	unlock, err := embedded.Lock(e.dataDir)
	if err != nil {
		return nil, err
	}
	e.closers = append(e.closers, unlock)
	if err := e.startPostgres(ctx, svc); err != nil {
		return nil, err
	}
	rdb, err := e.startRedis(svc)
	if err != nil {
		return nil, err
	}
	if err := e.startS3(ctx, svc); err != nil {
		return nil, err
	}
	broker, err := e.startBroker(svc, logger)
	if err != nil {
		return nil, err
	}
	if err := e.startSimulator(ctx, o, logger); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", o.apiAddr)
	if err != nil {
		return nil, fmt.Errorf("API address %s (choose another with -api-addr): %w", o.apiAddr, err)
	}
	e.apiURL = "http://" + ln.Addr().String()
	provCfg := config.Provider{Name: "replicate", BaseURL: e.simURL, APIToken: o.sim.APIToken, WebhookSecret: e.sim.WebhookSecret(),
		BreakerFailures: cmp.Or(o.breakerFailures, 5), BreakerOpen: 5 * time.Second, Routes: o.routes,
		CallbackURL: e.apiURL + "/v1/provider-callbacks/replicate", Timeout: 5 * time.Second,
		// The simulators serve their outputs over http on loopback.
		FetchAllowPrivateOutputs: true}
	if e.runwaySim != nil {
		provCfg.RunwayBaseURL, provCfg.RunwayAPIToken = e.runwayURL, o.runwaySim.APIToken
		if provCfg.Routes == "" {
			var routes []string
			for _, m := range svc.API.Models {
				routes = append(routes, m+"=replicate,runway:"+localRunwayModel)
			}
			provCfg.Routes = strings.Join(routes, ";")
		}
	}
	providers, err := functions.NewProviders(provCfg, svc.API.Models, logger)
	if err != nil {
		return nil, err
	}
	// Local runs the API and every stage: both binaries' lists, and the
	// collectors of the database that the adapter's processes serve.
	reg := telemetry.NewRegistry(slices.Concat(functions.StageCollectors(), functions.APICollectors())...)
	gauges := task.StateGauges(e.pool)
	e.closers = append(e.closers, gauges.Close)
	reg.MustRegister(quarantine.Collector(e.pool, catalog.Groups()), gauges)
	if err := e.serveOps(ctx, o.opsAddr, reg, rdb); err != nil {
		return nil, err
	}
	callbacks := make([]api.CallbackParser, 0, len(providers.Names()))
	for _, c := range providers.Clients() {
		callbacks = append(callbacks, c)
	}
	e.serveAPI(ctx, ln, svc, rdb, callbacks, reg, logger)
	deps := functions.Deps{Logger: logger, Pool: e.pool, Redis: rdb, Slots: slots.New(rdb, nil), Blob: e.blob,
		Media: media.New(config.Media{}), Providers: providers, Journey: svc.Journey, ReplayWindow: svc.ReplayWindow,
		ProviderTimeout: provCfg.Timeout, CallbackURL: provCfg.CallbackURLFor}
	if o.review || svc.Review {
		if deps.Review, err = e.startReviewer(ctx, o, logger); err != nil {
			return nil, err
		}
		e.kinds = append(e.kinds, "content review on (reviewer simulator at "+deps.Review.URL+")")
	}
	if err := e.runPipeline(ctx, cancel, deps, broker, o.workers, o.remote, reg, logger); err != nil {
		return nil, err
	}
	if e.devKey, err = devKey(ctx, e.pool); err != nil {
		return nil, err
	}
	ok = true
	return e, nil
}

// serveAPI serves the public API on ln until the environment closes.
func (e *environment) serveAPI(ctx context.Context, ln net.Listener, svc services, rdb *redis.Client, callbacks []api.CallbackParser,
	reg prometheus.Registerer, logger *slog.Logger) {
	srv := api.New(api.Options{Pool: e.pool, Redis: rdb, Blob: e.blob, Uploads: e.blob, Callbacks: callbacks, Limits: svc.API,
		Models: svc.API.Models, Price: billing.DefaultPrice, Replay: replay.NewDesk(e.pool, functions.ReplayRules(), &replay.DeskOpts{ReplayWindow: svc.ReplayWindow}),
		Registerer: reg, Logger: logger.With(slog.String("component", "api"))})
	httpSrv := &http.Server{Handler: srv.Handler(), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = httpSrv.Serve(ln) }()
	e.closers = append(e.closers, func() {
		shut, done := context.WithTimeout(context.Background(), 5*time.Second)
		defer done()
		_ = httpSrv.Shutdown(shut)
	})
	go func() {
		if err := srv.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
			e.done <- fmt.Errorf("api: %w", err)
		}
	}()
}

// serveOps answers /healthz, /readyz (PostgreSQL and Redis reachable) and
// /metrics for the whole one-process pipeline on addr.
func (e *environment) serveOps(ctx context.Context, addr string, reg *prometheus.Registry, rdb *redis.Client) error {
	ops, err := telemetry.Listen(addr, reg, func(ctx context.Context) error {
		if err := e.pool.Ping(ctx); err != nil {
			return fmt.Errorf("reach PostgreSQL: %w", err)
		}
		if err := rdb.Ping(ctx).Err(); err != nil {
			return fmt.Errorf("reach Redis: %w", err)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("%w (choose another with -ops-addr)", err)
	}
	e.opsURL = "http://" + ops.Addr()
	go func() {
		if err := ops.Serve(ctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
			e.done <- fmt.Errorf("ops server: %w", err)
		}
	}()
	return nil
}

// runPipeline serves the stages, their adapters and the relay, and
// returns once every function listens.
func (e *environment) runPipeline(ctx context.Context, cancel context.CancelFunc, deps functions.Deps, broker stack.Broker, workers int,
	remote map[string]string, reg prometheus.Registerer, logger *slog.Logger) error {
	st, err := stack.New(stack.Params{Deps: deps, Broker: broker, Workers: workers, RetryMin: 2 * time.Second, Remote: remote,
		Registerer: reg, Logger: logger})
	if err != nil {
		return err
	}
	ready := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		if err := st.Run(ctx, func() { close(ready) }); err != nil {
			e.done <- fmt.Errorf("pipeline: %w", err)
		}
	}()
	e.closers = append(e.closers, func() { cancel(); <-stopped })
	select {
	case <-ready:
		return nil
	case err := <-e.done:
		return err
	}
}

// devKey makes a key for the "dev" tenant, creating the tenant with a
// generous balance on first use.
func devKey(ctx context.Context, pool *pgxpool.Pool) (string, error) {
	var key string
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		var id string
		err := tx.QueryRow(ctx, `SELECT tenant_id::text FROM tenants WHERE name = 'dev' ORDER BY created_at LIMIT 1`).Scan(&id)
		if errors.Is(err, pgx.ErrNoRows) {
			c, err := tenant.Create(ctx, tx, tenant.NewTenant{Name: "dev", Credits: 1_000_000}, tenant.RoleTenant)
			key = c.Key
			return err
		}
		if err != nil {
			return err
		}
		_, key, err = tenant.NewKey(ctx, tx, uuid.MustParse(id), tenant.RoleTenant)
		return err
	})
	if err != nil {
		return "", fmt.Errorf("dev tenant: %w", err)
	}
	return key, nil
}
