package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"

	"github.com/aivedio/pipeline/adapter/dlq"
	"github.com/aivedio/pipeline/adapter/mq"
	"github.com/aivedio/pipeline/adapter/mq/rocketmq"
	"github.com/aivedio/pipeline/adapter/relay"
	"github.com/aivedio/pipeline/adapter/source"
	"github.com/aivedio/pipeline/shared/catalog"
	"github.com/aivedio/pipeline/shared/config"
	"github.com/aivedio/pipeline/shared/delivery"
	"github.com/aivedio/pipeline/shared/quarantine"
	"github.com/aivedio/pipeline/shared/task"
	"github.com/aivedio/pipeline/shared/telemetry"
)

func openPool(ctx context.Context, pg config.Postgres) (*pgxpool.Pool, error) {
	pcfg, err := pgxpool.ParseConfig(pg.URL)
	if err != nil {
		return nil, fmt.Errorf("DATABASE_URL: %w", err)
	}
	pcfg.MaxConns = pg.MaxConns
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return nil, fmt.Errorf("connect to PostgreSQL: %w", err)
	}
	return pool, nil
}

// serve runs the process and the ops server until ctx ends or either fails.
func serve(ctx context.Context, ops config.Ops, reg *prometheus.Registry, ready telemetry.ReadyFunc, work func(ctx context.Context) error) error {
	srv, err := telemetry.Listen(ops.HTTPAddr, reg, ready)
	if err != nil {
		return err
	}
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return srv.Serve(gctx) })
	g.Go(func() error { return work(gctx) })
	return g.Wait()
}

// readyWith is an adapter's /readyz: it does its work only while both
// PostgreSQL and the RocketMQ proxy answer.
func readyWith(pool *pgxpool.Pool, mqCfg config.RocketMQ) telemetry.ReadyFunc {
	return func(ctx context.Context) error {
		if err := pool.Ping(ctx); err != nil {
			return fmt.Errorf("postgresql: %w", err)
		}
		return rocketmq.Reachable(ctx, mqCfg)
	}
}

// logStopped is deferred by each long-running command as soon as it has a
// logger, so that it runs after every close deferred later: its line says
// the process let go of everything and is exiting. Without it a clean stop
// on SIGTERM left nothing in the logs after "... started", and could not be
// told from a SIGKILL or an OOM kill.
func logStopped(ctx context.Context, logger *slog.Logger, command string, err error) {
	if err != nil {
		logger.ErrorContext(ctx, command+" stopped", slog.String("error", err.Error()))
		return
	}
	logger.InfoContext(ctx, command+" stopped")
}

func runRelay(ctx context.Context, args []string) (err error) {
	if len(args) != 0 {
		return errors.New("usage: adapter relay (configured by environment)")
	}
	var cfg config.RelayCommand
	if err := config.Load(&cfg); err != nil {
		return err
	}
	logger := telemetry.NewLogger(cfg.LogFormat)
	defer func() { logStopped(ctx, logger, "relay", err) }()
	tracing, err := telemetry.SetupTracing(ctx, "aivedio-relay")
	if err != nil {
		return err
	}
	defer tracing.Close()
	pool, err := openPool(ctx, cfg.Postgres)
	if err != nil {
		return err
	}
	defer pool.Close()
	var names []string
	for _, t := range catalog.Topics() {
		names = append(names, t.BrokerName())
	}
	producer, err := rocketmq.NewProducer(cfg.RocketMQ, names...)
	if err != nil {
		return err
	}
	defer func() { _ = producer.Close() }()
	owner := cfg.Owner
	if owner == "" {
		host, _ := os.Hostname()
		owner = fmt.Sprintf("%s-%d", host, os.Getpid())
	}
	reg := telemetry.NewRegistry()
	// The relay always runs (a Deployment, unlike the stages that scale
	// to zero): its replicas export the watched task states, one at a time.
	gauges := task.StateGauges(pool)
	defer gauges.Close()
	reg.MustRegister(gauges)
	r := relay.New(relay.Params{
		Pool: pool, Producer: producer, Owner: owner, Batch: cfg.Batch, Publishers: cfg.Publishers, Lease: cfg.Lease,
		Logger: logger.With(slog.String("component", "relay")), Metrics: relay.NewMetrics(reg),
	})
	logger.InfoContext(ctx, "relay started", slog.String("owner", owner))
	return serve(ctx, cfg.Ops, reg, readyWith(pool, cfg.RocketMQ), r.Run)
}

func runSource(ctx context.Context, args []string) (err error) {
	fs := flag.NewFlagSet("source", flag.ContinueOnError)
	sink := fs.String("sink", "", "stage function URL (overrides SOURCE_SINK_URL)")
	group, err := parseGroup(fs, args)
	if err != nil {
		return err
	}
	var cfg config.SourceCommand
	if err := config.Load(&cfg); err != nil {
		return err
	}
	if *sink != "" {
		cfg.SinkURL = *sink
	}
	if cfg.SinkURL == "" {
		return errors.New("no sink: pass --sink URL or set SOURCE_SINK_URL to the stage function's URL")
	}
	// The source names the group in its own log lines.
	logger := telemetry.NewLogger(cfg.LogFormat)
	defer func() { logStopped(ctx, logger, "source", err) }()
	tracing, err := telemetry.SetupTracing(ctx, "aivedio-source")
	if err != nil {
		return err
	}
	defer tracing.Close()
	pool, err := openPool(ctx, cfg.Postgres)
	if err != nil {
		return err
	}
	defer pool.Close()
	consumers, err := openConsumers(cfg.RocketMQ, group, logger)
	if err != nil {
		return err
	}
	defer func() {
		for _, c := range consumers {
			_ = c.(*rocketmq.Consumer).Close()
		}
	}()
	reg := telemetry.NewRegistry()
	s := source.New(source.Params{
		Group: group, Consumers: consumers, Quarantine: pool,
		Deliverer:      delivery.NewHTTP(cfg.SinkURL, cfg.Workers, cfg.ColdStart),
		Workers:        cfg.Workers,
		Invisible:      cfg.Invisible,
		HandlerTimeout: cfg.HandlerTimeout,
		Logger:         logger, Metrics: source.NewMetrics(reg),
	})
	logger.InfoContext(ctx, "source started", slog.String("consumer_group", group.Name), slog.String("sink", cfg.SinkURL))
	return serve(ctx, cfg.Ops, reg, readyWith(pool, cfg.RocketMQ), s.Run)
}

// openConsumers opens the group's consumers on the proxy; they log their
// client replacements and recoveries to log.
func openConsumers(cfg config.RocketMQ, g catalog.Group, log *slog.Logger) ([]mq.Consumer, error) {
	opened, err := rocketmq.OpenGroup(cfg, g, 20*time.Second, log)
	if err != nil {
		return nil, err
	}
	out := make([]mq.Consumer, len(opened))
	for i, c := range opened {
		out[i] = c
	}
	return out, nil
}

func runDrain(ctx context.Context, args []string) (err error) {
	group, err := parseGroup(flag.NewFlagSet("dlq drain", flag.ContinueOnError), args)
	if err != nil {
		return err
	}
	var cfg config.DrainCommand
	if err := config.Load(&cfg); err != nil {
		return err
	}
	// The drainer names the group in its own log lines.
	logger := telemetry.NewLogger(cfg.LogFormat)
	defer func() { logStopped(ctx, logger, "dlq drain", err) }()
	tracing, err := telemetry.SetupTracing(ctx, "aivedio-dlq-drain")
	if err != nil {
		return err
	}
	defer tracing.Close()
	pool, err := openPool(ctx, cfg.Postgres)
	if err != nil {
		return err
	}
	defer pool.Close()
	reg := telemetry.NewRegistry()
	reg.MustRegister(quarantine.Collector(pool, []catalog.Group{group}))
	d := dlq.New(dlq.Params{
		Group: group, ConsumerFunc: dlq.OpenConsumer(cfg.RocketMQ, group, nil), DB: pool,
		Logger: logger, Metrics: dlq.NewMetrics(reg),
	})
	defer func() { _ = d.Close() }()
	logger.InfoContext(ctx, "dlq drain started", slog.String("consumer_group", group.Name), slog.String("dlq_topic", group.DLQTopic()))
	return serve(ctx, cfg.Ops, reg, readyWith(pool, cfg.RocketMQ), d.Run)
}

// parseGroup parses args with fs plus a --group flag naming a catalog group.
func parseGroup(fs *flag.FlagSet, args []string) (catalog.Group, error) {
	name := fs.String("group", "", "consumer group (firm name, e.g. cg.asset.probe.v1)")
	if err := fs.Parse(args); err != nil {
		return catalog.Group{}, err
	}
	return catalog.GroupByName(*name)
}
