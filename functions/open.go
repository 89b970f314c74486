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
	"github.com/aivedio/pipeline/shared/provider/runway"
	"github.com/aivedio/pipeline/shared/slots"
)

// Open makes every resource of Deps from cfg. The returned close releases
// them; call it once the function has stopped.
func Open(ctx context.Context, cfg config.StageFunction, logger *slog.Logger) (Deps, func(), error) {
	d := Deps{Logger: logger, Journey: cfg.Journey, ReplayWindow: cfg.Retention.ReplayWindow, ProviderTimeout: cfg.Provider.Timeout, CallbackURL: cfg.Provider.CallbackURLFor,
		RenderChunk: cfg.Media.RenderChunk, RenderLease: cfg.Media.RenderLease,
		RenderChunkTimeoutFactor: cfg.Media.RenderChunkTimeoutFactor, RenderChunkTimeoutMin: cfg.Media.RenderChunkTimeoutMin,
		RenderTenantChunks: cfg.Media.RenderTenantChunks, Review: cfg.Review}
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
	if d.Providers, err = NewProviders(cfg.Provider, nil, logger); err != nil {
		closeAll()
		return Deps{}, nil, err
	}
	return d, closeAll, nil
}

// NewProviders builds every configured provider client, each behind a
// circuit breaker of its own, and the routes among them (PROVIDER_ROUTES).
// models, when given, must all be routed: the API passes API_MODELS, so a
// model it accepts always has a provider.
func NewProviders(cfg config.Provider, models []string, logger *slog.Logger) (*provider.Set, error) {
	clients, err := ProviderClients(cfg, logger)
	if err != nil {
		return nil, err
	}
	routes, err := cfg.ParsedRoutes()
	if err != nil {
		return nil, err
	}
	for i, c := range clients {
		clients[i] = provider.WithBreaker(c, provider.BreakerSettings{Failures: cfg.BreakerFailures, Open: cfg.BreakerOpen,
			OnStateChange: func(name, from, to string) {
				logger.Warn("provider circuit breaker changed state", slog.String("provider", name), slog.String("from", from), slog.String("to", to))
			}})
	}
	return provider.NewSet(clients, routes, models)
}

// ProviderClients builds the configured provider clients without their
// breakers, PROVIDER_NAME's first: the API verifies callbacks with them.
func ProviderClients(cfg config.Provider, logger *slog.Logger) ([]provider.Client, error) {
	var clients []provider.Client
	switch cfg.Name {
	case replicate.DefaultName:
		c, err := replicate.New(replicate.Config{Name: cfg.Name, BaseURL: cfg.BaseURL, APIToken: cfg.APIToken,
			WebhookSecret: cfg.WebhookSecret, Timeout: cfg.Timeout, Outputs: outputGuard(cfg), Logger: logger.With(slog.String("provider", cfg.Name))})
		if err != nil {
			return nil, fmt.Errorf("provider %s: %w", cfg.Name, err)
		}
		clients = append(clients, c)
	default:
		return nil, errors.New("PROVIDER_NAME " + cfg.Name + " has no client; known: " + replicate.DefaultName)
	}
	if cfg.RunwayBaseURL != "" {
		c, err := runway.New(runway.Config{BaseURL: cfg.RunwayBaseURL, APIToken: cfg.RunwayAPIToken, Timeout: cfg.Timeout, Outputs: outputGuard(cfg),
			Logger: logger.With(slog.String("provider", runway.DefaultName))})
		if err != nil {
			return nil, fmt.Errorf("provider %s: %w", runway.DefaultName, err)
		}
		clients = append(clients, c)
	}
	return clients, nil
}

// outputGuard is what FETCH_MAX_BYTES and FETCH_ALLOW_PRIVATE_OUTPUTS let
// an output download do.
func outputGuard(cfg config.Provider) provider.OutputGuard {
	return provider.OutputGuard{AllowPrivate: cfg.FetchAllowPrivateOutputs, MaxBytes: cfg.FetchMaxBytes}
}
