// Command api serves the public HTTP API (functions/api) on API_ADDR and
// /healthz, /readyz and /metrics on HTTP_ADDR. It reads config.APIServer
// from the environment (see docs/configuration.md) and stops cleanly on SIGTERM or
// interrupt: it stops accepting requests, closes the event streams, lets
// requests in flight finish for up to shutdownGrace, then exits.
//
//	go run ./functions/cmd/api
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/errgroup"

	"github.com/aivedio/pipeline/functions"
	"github.com/aivedio/pipeline/functions/api"
	"github.com/aivedio/pipeline/shared/billing"
	"github.com/aivedio/pipeline/shared/blob"
	"github.com/aivedio/pipeline/shared/config"
	"github.com/aivedio/pipeline/shared/replay"
	"github.com/aivedio/pipeline/shared/telemetry"
)

// shutdownGrace bounds how long requests in flight may finish after a
// stop signal.
const shutdownGrace = 20 * time.Second

func main() {
	if config.HelpRequested(os.Args[1:]) {
		if err := config.PrintUsage(os.Stdout, "usage: api\n  serves the public HTTP API (docs/api.md); configured by the environment only", &config.APIServer{}); err != nil {
			fmt.Fprintln(os.Stderr, "api:", err)
			os.Exit(1)
		}
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "api:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context) (err error) {
	var cfg config.APIServer
	if err := config.Load(&cfg); err != nil {
		return err
	}
	logger := telemetry.NewLogger(cfg.LogFormat)
	// Deferred first so that it runs last, after the pool and Redis are
	// closed: without it a clean stop left "api stopping" as the last line,
	// which reads the same whether the drain finished or the process was
	// killed in it.
	defer func() {
		if err != nil {
			logger.ErrorContext(ctx, "api stopped", slog.String("error", err.Error()))
			return
		}
		logger.InfoContext(ctx, "api stopped")
	}()
	tracing, err := telemetry.SetupTracing(ctx, "aivedio-api")
	if err != nil {
		return err
	}
	defer tracing.Close()

	pool, err := openPool(ctx, cfg.Postgres)
	if err != nil {
		return err
	}
	defer pool.Close()
	rdb, err := openRedis(cfg.Redis)
	if err != nil {
		return err
	}
	defer func() { _ = rdb.Close() }()
	store, err := blob.New(ctx, cfg.S3)
	if err != nil {
		return err
	}
	parsers, err := CallbackParsers(cfg.Provider, cfg.API.Models, logger)
	if err != nil {
		return err
	}

	reg := telemetry.NewRegistry(functions.APICollectors()...)
	srv := api.New(api.Options{
		Pool: pool, Redis: rdb, Blob: store, Uploads: store, Callbacks: parsers, Limits: cfg.API,
		Models: cfg.API.Models, Price: billing.DefaultPrice, Replay: replay.NewDesk(pool, functions.ReplayRules(), &replay.DeskOpts{ReplayWindow: cfg.ReplayWindow}),
		Logger: logger, Registerer: reg,
	})
	// Ready needs both: without PostgreSQL no route works, and without
	// Redis no event stream opens.
	ready := func(ctx context.Context) error {
		if err := pool.Ping(ctx); err != nil {
			return fmt.Errorf("ping PostgreSQL: %w", err)
		}
		if err := rdb.Ping(ctx).Err(); err != nil {
			return fmt.Errorf("ping Redis: %w", err)
		}
		return nil
	}
	ops, err := telemetry.Listen(cfg.HTTPAddr, reg, ready)
	if err != nil {
		return err
	}
	l, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return fmt.Errorf("listen on API_ADDR %s: %w", cfg.Addr, err)
	}
	httpSrv := &http.Server{
		Handler:           srv.Handler(),
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       30 * time.Second,
		// Event streams lift this per write; everything else answers well
		// within it.
		WriteTimeout: 60 * time.Second,
		IdleTimeout:  2 * time.Minute,
		ErrorLog:     slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}

	// Event streams never go idle, so Shutdown would wait out its grace on
	// them: ending the Redis subscription closes them first.
	listenCtx, stopListener := context.WithCancel(context.WithoutCancel(ctx))
	defer stopListener()
	httpSrv.RegisterOnShutdown(stopListener)

	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return ops.Serve(gctx) })
	g.Go(func() error { return srv.Run(listenCtx) })
	g.Go(func() error {
		logger.InfoContext(ctx, "api serving", slog.String("addr", l.Addr().String()), slog.String("ops_addr", ops.Addr()))
		if err := httpSrv.Serve(l); !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("serve API: %w", err)
		}
		return nil
	})
	g.Go(func() error {
		<-gctx.Done()
		logger.InfoContext(ctx, "api stopping")
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownGrace)
		defer cancel()
		err := httpSrv.Shutdown(sctx)
		stopListener()
		if err != nil {
			return fmt.Errorf("shut down API: %w", err)
		}
		return nil
	})
	return g.Wait()
}

// CallbackParsers builds the verifiers of provider callbacks, one per
// configured provider, after checking that PROVIDER_ROUTES serves every
// model API_MODELS accepts: a generation the API takes always has a
// provider.
func CallbackParsers(cfg config.Provider, models []string, logger *slog.Logger) ([]api.CallbackParser, error) {
	if _, err := functions.NewProviders(cfg, models, logger); err != nil {
		return nil, err
	}
	clients, err := functions.ProviderClients(cfg, logger)
	if err != nil {
		return nil, err
	}
	if cfg.WebhookSecret == "" {
		logger.Warn("PROVIDER_WEBHOOK_SECRET is empty: every provider callback will be refused", slog.String("provider", cfg.Name))
	}
	parsers := make([]api.CallbackParser, len(clients))
	for i, c := range clients {
		parsers[i] = c
	}
	return parsers, nil
}

func openPool(ctx context.Context, pg config.Postgres) (*pgxpool.Pool, error) {
	pcfg, err := pgxpool.ParseConfig(pg.URL)
	if err != nil {
		return nil, errors.New("DATABASE_URL is not a valid PostgreSQL URL")
	}
	pcfg.MaxConns = pg.MaxConns
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return nil, fmt.Errorf("connect to PostgreSQL: %w", err)
	}
	return pool, nil
}

// openRedis makes the client of the live view. It connects lazily: the
// event subscription retries until Redis answers, and /readyz reports it.
// The parse error is not wrapped, as in openPool: it may quote the URL,
// password included.
func openRedis(r config.Redis) (*redis.Client, error) {
	opts, err := redis.ParseURL(r.URL)
	if err != nil {
		return nil, errors.New("REDIS_URL is not a valid Redis URL")
	}
	return redis.NewClient(opts), nil
}
