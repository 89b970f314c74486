package functions

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/aivedio/pipeline/shared/blob"
	"github.com/aivedio/pipeline/shared/config"
	"github.com/aivedio/pipeline/shared/media"
	"github.com/aivedio/pipeline/shared/provider"
	"github.com/aivedio/pipeline/shared/provider/replicate"
	"github.com/aivedio/pipeline/shared/slots"
)

// Open makes every resource of Deps from cfg. The returned close releases
// them; call it once the function has stopped.
func Open(ctx context.Context, cfg config.StageFunction, logger *slog.Logger) (Deps, func(), error) {
	d := Deps{Logger: logger, Journey: cfg.Journey, ReplayWindow: cfg.Retention.ReplayWindow, ProviderTimeout: cfg.Provider.Timeout, CallbackURL: cfg.Provider.CallbackURL,
		RenderChunk: cfg.Media.RenderChunk, RenderLease: cfg.Media.RenderLease, Review: cfg.Review}
	pcfg, err := pgxpool.ParseConfig(cfg.Postgres.URL)
	if err != nil {
		return Deps{}, nil, fmt.Errorf("DATABASE_URL: %w", err)
	}
	pcfg.MaxConns = cfg.Postgres.MaxConns
	if d.Pool, err = pgxpool.NewWithConfig(ctx, pcfg); err != nil {
		return Deps{}, nil, fmt.Errorf("open database pool: %w", err)
	}
	ropts, err := redis.ParseURL(cfg.Redis.URL)
	if err != nil {
		d.Pool.Close()
		return Deps{}, nil, fmt.Errorf("REDIS_URL: %w", err)
	}
	rdb := redis.NewClient(ropts)
	d.Redis = rdb
	d.Slots = slots.New(rdb, nil)
	closeAll := func() {
		_ = rdb.Close()
		d.Pool.Close()
	}
	if d.Blob, err = blob.New(ctx, cfg.S3); err != nil {
		closeAll()
		return Deps{}, nil, err
	}
	d.Media = media.New(cfg.Media)
	if d.Provider, err = NewProvider(cfg.Provider, logger); err != nil {
		closeAll()
		return Deps{}, nil, err
	}
	return d, closeAll, nil
}

// NewProvider builds the provider client PROVIDER_NAME names.
func NewProvider(cfg config.Provider, logger *slog.Logger) (provider.Client, error) {
	switch cfg.Name {
	case replicate.DefaultName:
		c, err := replicate.New(replicate.Config{Name: cfg.Name, BaseURL: cfg.BaseURL, APIToken: cfg.APIToken,
			WebhookSecret: cfg.WebhookSecret, Timeout: cfg.Timeout, Logger: logger})
		if err != nil {
			return nil, err
		}
		return provider.WithBreaker(c, provider.BreakerSettings{Failures: cfg.BreakerFailures, Open: cfg.BreakerOpen,
			OnStateChange: func(name, from, to string) {
				logger.Warn("provider circuit breaker changed state", slog.String("provider", name), slog.String("from", from), slog.String("to", to))
			}}), nil
	default:
		return nil, errors.New("PROVIDER_NAME " + cfg.Name + " has no client; known: " + replicate.DefaultName)
	}
}
