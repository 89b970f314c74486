package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/aivedio/pipeline/local/drive"
	"github.com/aivedio/pipeline/local/embedded"
	"github.com/aivedio/pipeline/local/providersim"
	"github.com/aivedio/pipeline/local/reviewsim"
	"github.com/aivedio/pipeline/local/stack"
	"github.com/aivedio/pipeline/migrations"
	"github.com/aivedio/pipeline/shared/blob"
	"github.com/aivedio/pipeline/shared/config"
)

// This file holds what the local run starts or connects to beside the
// pipeline: PostgreSQL, Redis and S3 (embedded when the environment names
// none), the broker, the provider simulators and the content reviewer.

// startPostgres opens the database at DATABASE_URL, or starts an embedded
// PostgreSQL in the data directory, and migrates it.
func (e *environment) startPostgres(ctx context.Context, svc services) error {
	dbURL := svc.DatabaseURL
	if dbURL == "" {
		dir := filepath.Join(e.dataDir, "postgres")
		fmt.Fprintln(os.Stderr, "starting embedded PostgreSQL in", dir, "(the first run downloads it)")
		url, stop, err := embedded.Postgres(dir, io.Discard)
		if err != nil {
			return err
		}
		e.closers = append(e.closers, func() { _ = stop() })
		dbURL, e.dbURL = url, url
		e.state = append(e.state, "PostgreSQL")
		e.kinds = append(e.kinds, "embedded PostgreSQL")
	} else {
		e.kinds = append(e.kinds, "PostgreSQL at DATABASE_URL")
	}
	if err := migrations.Up(ctx, dbURL); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		return fmt.Errorf("open database: %w", err)
	}
	e.pool = pool
	e.closers = append(e.closers, pool.Close)
	return nil
}

// dataDir is LOCAL_DATA_DIR, or its default: a folder of the user's cache,
// and for root one under /tmp, since root's own cache (under /root) is
// closed to the user the embedded PostgreSQL then runs as.
func dataDir(svc services) (string, error) {
	if svc.LocalDir != "" {
		return filepath.Abs(svc.LocalDir)
	}
	if os.Geteuid() == 0 {
		return rootDataDir, nil
	}
	home, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("no cache directory for the local state; set LOCAL_DATA_DIR: %w", err)
	}
	return filepath.Join(home, "aivedio", "local"), nil
}

// rootDataDir is the default data directory of a run as root.
const rootDataDir = "/tmp/aivedio-local-data"

// startRedis connects to REDIS_URL, or to an in-memory Redis. Redis
// holds nothing PostgreSQL does not know: concurrency slots (leases the
// reconciler's scan rebuilds from the tasks in flight), live progress and
// pushed versions (best effort by design, package live), so an embedded
// one may start empty after a restart.
func (e *environment) startRedis(svc services) (*redis.Client, error) {
	redisURL := svc.RedisURL
	if redisURL == "" {
		url, stop, err := embedded.Redis()
		if err != nil {
			return nil, err
		}
		e.closers = append(e.closers, stop)
		redisURL = url
		e.kinds = append(e.kinds, "in-memory Redis")
		e.volatile = "Redis stays in memory: it only mirrors PostgreSQL (the reconciler rebuilds the concurrency slots; live progress is best effort)"
	} else {
		e.kinds = append(e.kinds, "Redis at REDIS_URL")
	}
	ropts, err := redis.ParseURL(redisURL)
	if err != nil {
		return nil, fmt.Errorf("REDIS_URL: %w", err)
	}
	rdb := redis.NewClient(ropts)
	e.closers = append(e.closers, func() { _ = rdb.Close() })
	return rdb, nil
}

// startS3 opens the bucket at S3_ENDPOINT, or an embedded S3's whose
// objects are in the data directory.
func (e *environment) startS3(ctx context.Context, svc services) error {
	s3cfg := svc.S3
	if s3cfg.Endpoint == "" {
		endpoint, stop, err := embedded.S3(filepath.Join(e.dataDir, "s3"))
		if err != nil {
			return err
		}
		e.closers = append(e.closers, func() { _ = stop() })
		s3cfg.Endpoint, s3cfg.AccessKeyID, s3cfg.SecretAccessKey = endpoint, "local", "local-secret"
		e.s3URL = endpoint
		e.kinds = append(e.kinds, "embedded S3")
		e.state = append(e.state, "objects")
	} else {
		e.kinds = append(e.kinds, "S3 at S3_ENDPOINT")
	}
	store, err := blob.New(ctx, s3cfg)
	if err != nil {
		return err
	}
	if err := store.EnsureBucket(ctx); err != nil {
		return err
	}
	e.blob = store
	return nil
}

// startBroker connects to the RocketMQ proxy at ROCKETMQ_ENDPOINT, or
// starts the in-process emulator with its messages in the data directory.
//
// The emulator's messages are durable rather than re-driven from
// PostgreSQL after a restart: the outbox relay republishes only what it
// never published, and the reconciler re-emits a step only past its
// thresholds (RECONCILE_SCAN_GRACE, RECONCILE_STUCK_AFTER), which are
// right for a lost message on a real broker and far too slow here, where
// every message dies with the process. A journal gives the restarted
// pipeline what RocketMQ would: the same messages, delayed ones at their
// times, the ones being handled at the kill delivered again at once
// (consumers dedupe them with the inbox).
func (e *environment) startBroker(svc services, logger *slog.Logger) (stack.Broker, error) {
	if svc.RocketMQEndpoint == "" {
		em, err := stack.OpenEmulator(filepath.Join(e.dataDir, "broker", "journal"))
		if err != nil {
			return nil, err
		}
		e.closers = append(e.closers, func() { _ = em.Close() })
		e.kinds = append(e.kinds, "in-process broker emulator")
		e.state = append(e.state, "broker queues")
		return em, nil
	}
	r, err := stack.NewRocketMQ(config.RocketMQ{Endpoint: svc.RocketMQEndpoint, AccessKey: svc.RocketMQAccessKey, SecretKey: svc.RocketMQSecretKey})
	if err != nil {
		return nil, fmt.Errorf("connect to RocketMQ (topics applied? go run ./adapter topics apply): %w", err)
	}
	r.Logger = logger
	e.closers = append(e.closers, func() { _ = r.Close() })
	e.kinds = append(e.kinds, "RocketMQ at ROCKETMQ_ENDPOINT")
	return r, nil
}

// startSimulator starts the provider simulator on a loopback port, its
// jobs in the data directory: the pipeline's PostgreSQL remembers the
// remote jobs it started, so the provider must too.
func (e *environment) startSimulator(ctx context.Context, o options, logger *slog.Logger) error {
	if o.sim.StateFile == "" {
		o.sim.StateFile = filepath.Join(e.dataDir, "providersim", "jobs")
	}
	e.state = append(e.state, "simulator jobs")
	sim, err := providersim.New(o.sim, logger.With(slog.String("component", "providersim")))
	if err != nil {
		return err
	}
	e.closers = append(e.closers, func() { _ = sim.Close() })
	if e.simURL, err = sim.Start(ctx, "127.0.0.1:0"); err != nil {
		return err
	}
	e.sim = sim
	if !o.runway {
		return nil
	}
	if o.runwaySim.StateFile == "" {
		o.runwaySim.StateFile = filepath.Join(e.dataDir, "providersim", "runway-jobs")
	}
	if o.runwaySim.CacheDir == "" {
		o.runwaySim.CacheDir = o.sim.CacheDir
	}
	rw, err := providersim.New(o.runwaySim, logger.With(slog.String("component", "providersim-runway")))
	if err != nil {
		return err
	}
	e.closers = append(e.closers, func() { _ = rw.Close() })
	if e.runwayURL, err = rw.Start(ctx, "127.0.0.1:0"); err != nil {
		return err
	}
	e.runwaySim = rw
	return nil
}

// runwayLine is the banner's line of the Runway simulator, "" without it.
func (e *environment) runwayLine() string {
	if e.runwaySim == nil {
		return ""
	}
	return fmt.Sprintf("\n  runway     %s  (stats: %s/sim/stats; every model fails over to it as %s)", e.runwayURL, e.runwayURL, localRunwayModel)
}

// localRunwayModel is the Runway model every model fails over to locally:
// a text-to-video model that takes the demo's 1280x720 and 2–5 s.
const localRunwayModel = "gen4.5"

// facts are where drive.Check reads the truth of a run on this
// environment: remote jobs per key from the Replicate simulator, and per
// prompt (per task) from both.
func (e *environment) facts() drive.Facts {
	st := e.sim.Stats()
	byPrompt := maps.Clone(st.JobsByPrompt)
	if byPrompt == nil {
		byPrompt = map[string]int{}
	}
	if e.runwaySim != nil {
		for p, n := range e.runwaySim.Stats().JobsByPrompt {
			byPrompt[p] += n
		}
	}
	var attention []string
	if e.runwaySim != nil {
		// Runway offers no lookup: a dropped answer there is for a person.
		attention = append(attention, "reconcile.submit_unknown")
	}
	return drive.Facts{Pool: e.pool, Blob: e.blob, JobsByKey: st.JobsByIdempotencyKey, JobsByPrompt: byPrompt, Review: e.reviewSim != nil,
		Attention: attention}
}

// startReviewer starts the reviewer simulator on a loopback port and
// returns the review configuration that calls it: content review is on.
func (e *environment) startReviewer(ctx context.Context, o options, logger *slog.Logger) (config.Review, error) {
	sim, err := reviewsim.New(o.reviewSim, logger.With(slog.String("component", "reviewsim")))
	if err != nil {
		return config.Review{}, err
	}
	e.closers = append(e.closers, func() { _ = sim.Close() })
	url, err := sim.Start(ctx, "127.0.0.1:0")
	if err != nil {
		return config.Review{}, err
	}
	e.reviewSim = sim
	cfg := config.Review{URL: url, Secret: sim.Secret(), Timeout: 15 * time.Second, MaxWait: 30 * time.Minute,
		Base: time.Second, Most: 30 * time.Second, Frames: 3, URLTTL: 10 * time.Minute}
	return cfg, cfg.Validate()
}
