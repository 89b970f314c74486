// Package config holds the environment-driven configuration blocks that the
// binaries share. Each binary embeds the blocks it needs into one Config
// struct, loads it once at start with [Load] and calls Validate.
//
// Nothing else in the module reads the environment: tests use t.Setenv.
package config

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/kelseyhightower/envconfig"

	"github.com/aivedio/pipeline/shared/provider"
)

// Postgres locates the source-of-truth database.
type Postgres struct {
	URL      string `envconfig:"DATABASE_URL" required:"true" desc:"PostgreSQL connection URL, e.g. postgres://user@127.0.0.1:5432/aivedio?sslmode=disable"`
	MaxConns int32  `envconfig:"DATABASE_MAX_CONNS" default:"16" desc:"upper bound of the connection pool; PostgreSQL slows past ~16 busy connections on 2 cores"`
}

// Validate reports the first unusable setting, naming its variable.
func (p Postgres) Validate() error {
	u, err := url.Parse(p.URL)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		return errors.New("DATABASE_URL must be a postgres:// URL")
	}
	if p.MaxConns < 1 {
		return errors.New("DATABASE_MAX_CONNS must be at least 1")
	}
	return nil
}

// RocketMQ locates the RocketMQ 5 proxy (gRPC) and, for administration, the
// name server.
type RocketMQ struct {
	Endpoint  string `envconfig:"ROCKETMQ_ENDPOINT" required:"true" desc:"host:port of the RocketMQ 5 proxy's gRPC endpoint"`
	Namesrv   string `envconfig:"ROCKETMQ_NAMESRV" desc:"host:port of the name server; needed only by 'adapter topics apply'"`
	Cluster   string `envconfig:"ROCKETMQ_CLUSTER" default:"DefaultCluster" desc:"broker cluster that topics and groups are created in"`
	AccessKey string `envconfig:"ROCKETMQ_ACCESS_KEY" desc:"ACL access key; empty when the broker has no ACL"`
	SecretKey string `envconfig:"ROCKETMQ_SECRET_KEY" desc:"ACL secret key"`
	// AdminClasspath points at the RocketMQ jars whose admin tool applies the
	// topic catalog: the Go client has no admin API.
	AdminClasspath string `envconfig:"ROCKETMQ_ADMIN_CLASSPATH" desc:"Java classpath of the RocketMQ tools jars (e.g. /opt/rocketmq/lib/*); needed only by 'adapter topics apply'"`
	// The RocketMQ Go client logs through a zap logger of its own, by
	// default every RPC at info into $HOME/logs/rocketmq.
	ClientLogLevel string `envconfig:"ROCKETMQ_CLIENT_LOG_LEVEL" default:"warn" desc:"level of the RocketMQ Go client's own log: debug, info, warn or error"`
	ClientLogDir   string `envconfig:"ROCKETMQ_CLIENT_LOG_DIR" desc:"directory for the RocketMQ Go client's own rotating log files; empty: its lines go to stderr"`
}

// Validate reports the first unusable setting, naming its variable.
func (r RocketMQ) Validate() error {
	if !strings.Contains(r.Endpoint, ":") {
		return fmt.Errorf("ROCKETMQ_ENDPOINT must be host:port, got %q", r.Endpoint)
	}
	if (r.AccessKey == "") != (r.SecretKey == "") {
		return errors.New("ROCKETMQ_ACCESS_KEY and ROCKETMQ_SECRET_KEY must be set together")
	}
	switch r.ClientLogLevel {
	case "", "debug", "info", "warn", "error":
	default:
		return fmt.Errorf("ROCKETMQ_CLIENT_LOG_LEVEL must be debug, info, warn or error, got %q", r.ClientLogLevel)
	}
	return nil
}

// RocketMQAdmin is who the admin tool signs as when it applies the topic
// catalog to a cluster with ACL on: a user allowed to create topics and
// groups, usually not the one the adapters run as.
type RocketMQAdmin struct {
	AccessKey string `envconfig:"ROCKETMQ_ADMIN_ACCESS_KEY" desc:"ACL access key 'adapter topics apply' signs with; ROCKETMQ_ACCESS_KEY when empty"`
	SecretKey string `envconfig:"ROCKETMQ_ADMIN_SECRET_KEY" desc:"ACL secret key of ROCKETMQ_ADMIN_ACCESS_KEY"`
}

// Validate reports the first unusable setting, naming its variable.
func (a RocketMQAdmin) Validate() error {
	if (a.AccessKey == "") != (a.SecretKey == "") {
		return errors.New("ROCKETMQ_ADMIN_ACCESS_KEY and ROCKETMQ_ADMIN_SECRET_KEY must be set together")
	}
	return nil
}

// Redis locates the coordination store (slots, leases, live progress).
type Redis struct {
	URL string `envconfig:"REDIS_URL" required:"true" desc:"Redis URL, e.g. redis://127.0.0.1:6379/0"`
}

// Validate reports the first unusable setting, naming its variable.
func (r Redis) Validate() error {
	if u, err := url.Parse(r.URL); err != nil || (u.Scheme != "redis" && u.Scheme != "rediss") {
		return errors.New("REDIS_URL must be a redis:// or rediss:// URL")
	}
	return nil
}

// S3 locates the object store that holds every media byte.
type S3 struct {
	Endpoint        string `envconfig:"S3_ENDPOINT" desc:"S3-compatible endpoint URL; empty means AWS S3"`
	Region          string `envconfig:"S3_REGION" default:"us-east-1" desc:"S3 region"`
	Bucket          string `envconfig:"S3_BUCKET" default:"aivedio-media" desc:"bucket for media objects"`
	AccessKeyID     string `envconfig:"S3_ACCESS_KEY_ID" desc:"S3 access key id; empty uses the AWS default credential chain"`
	SecretAccessKey string `envconfig:"S3_SECRET_ACCESS_KEY" desc:"S3 secret access key"`
}

// Validate reports the first unusable setting, naming its variable.
func (s S3) Validate() error {
	if s.Endpoint != "" {
		if u, err := url.Parse(s.Endpoint); err != nil || (u.Scheme != "http" && u.Scheme != "https") {
			return errors.New("S3_ENDPOINT must be an http:// or https:// URL")
		}
	}
	if s.Bucket == "" {
		return errors.New("S3_BUCKET must not be empty")
	}
	if (s.AccessKeyID == "") != (s.SecretAccessKey == "") {
		return errors.New("S3_ACCESS_KEY_ID and S3_SECRET_ACCESS_KEY must be set together")
	}
	return nil
}

// Media locates the ffmpeg tools.
type Media struct {
	FFmpegPath  string        `envconfig:"FFMPEG_PATH" default:"ffmpeg" desc:"ffmpeg binary"`
	FFprobePath string        `envconfig:"FFPROBE_PATH" default:"ffprobe" desc:"ffprobe binary"`
	RenderChunk time.Duration `envconfig:"RENDER_CHUNK" default:"10s" desc:"output one render delivery renders: each chunk must finish well within the render Service's timeoutSeconds"`
	RenderLease time.Duration `envconfig:"RENDER_LEASE" default:"2m" desc:"how long a chunk's claim holds without renewal: a render delivery that died gives its chunk up this long after its last renewal"`
	// RenderChunkTimeoutFactor and RenderChunkTimeoutMin give every ffmpeg
	// run of a chunk its deadline.
	RenderChunkTimeoutFactor int           `envconfig:"RENDER_CHUNK_TIMEOUT_FACTOR" default:"12" desc:"a chunk's ffmpeg run is killed past this many times the chunk's output (RENDER_CHUNK), and the chunk fails render.chunk_timeout (tried again up to 4 times)"`
	RenderChunkTimeoutMin    time.Duration `envconfig:"RENDER_CHUNK_TIMEOUT_MIN" default:"1m" desc:"the shortest deadline of a chunk's ffmpeg run, however short the chunk"`
	// RenderTenantChunks bounds one tenant's share of the render fleet.
	RenderTenantChunks int `envconfig:"RENDER_TENANT_CHUNKS" default:"4" desc:"at most this many chunks of one tenant render at once across every render function (Redis slots); more wait on render.export.delay, acknowledged"`
	// MediaTimeoutFactor and MediaTimeoutMin give every other ffmpeg run
	// (proxy, thumbnail, waveform, review frames) its deadline.
	MediaTimeoutFactor int           `envconfig:"MEDIA_TIMEOUT_FACTOR" default:"12" desc:"a proxy or waveform ffmpeg run is killed past this many times its input's duration"`
	MediaTimeoutMin    time.Duration `envconfig:"MEDIA_TIMEOUT_MIN" default:"1m" desc:"the shortest deadline of an ffmpeg run outside renders; a thumbnail or review frame gets exactly this"`
}

// Validate checks the render knobs.
func (m Media) Validate() error {
	switch {
	case m.RenderChunk < time.Second || m.RenderChunk > 5*time.Minute:
		return fmt.Errorf("RENDER_CHUNK must be between 1s and 5m, got %s", m.RenderChunk)
	case m.RenderLease < 10*time.Second:
		return fmt.Errorf("RENDER_LEASE must be at least 10s (it is renewed every quarter of it), got %s", m.RenderLease)
	case m.RenderChunkTimeoutFactor < 1:
		return fmt.Errorf("RENDER_CHUNK_TIMEOUT_FACTOR must be at least 1, got %d", m.RenderChunkTimeoutFactor)
	case m.RenderChunkTimeoutMin < time.Second:
		return fmt.Errorf("RENDER_CHUNK_TIMEOUT_MIN must be at least 1s, got %s", m.RenderChunkTimeoutMin)
	case m.RenderTenantChunks < 1:
		return fmt.Errorf("RENDER_TENANT_CHUNKS must be at least 1, got %d", m.RenderTenantChunks)
	case m.MediaTimeoutFactor < 1:
		return fmt.Errorf("MEDIA_TIMEOUT_FACTOR must be at least 1, got %d", m.MediaTimeoutFactor)
	case m.MediaTimeoutMin < time.Second:
		return fmt.Errorf("MEDIA_TIMEOUT_MIN must be at least 1s, got %s", m.MediaTimeoutMin)
	}
	return nil
}

// Validator is a configuration block or Config that can check itself.
type Validator interface{ Validate() error }

// Load fills cfg from the environment and validates it. cfg must be a pointer
// to a struct whose fields carry envconfig tags.
func Load(cfg Validator) error {
	if err := envconfig.Process("", cfg); err != nil {
		return fmt.Errorf("load configuration: %w", err)
	}
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("invalid configuration: %w", err)
	}
	return nil
}

// Getenv reads one variable, for a component whose knobs are flags too and
// keep their own table of names (the provider simulator's
// Options.LoadEnv): with [Load], the only way the module reads the
// environment.
func Getenv(name string) string { return os.Getenv(name) }

// Ops is the operational surface every binary has.
type Ops struct {
	HTTPAddr  string `envconfig:"HTTP_ADDR" default:":9090" desc:"listen address of /healthz, /readyz and /metrics"`
	LogFormat string `envconfig:"LOG_FORMAT" default:"json" desc:"json in deployments, text for local runs"`
}

// Validate reports the first unusable setting, naming its variable.
func (o Ops) Validate() error {
	if o.LogFormat != "json" && o.LogFormat != "text" {
		return fmt.Errorf("LOG_FORMAT must be json or text, got %q", o.LogFormat)
	}
	return nil
}

// Relay tunes the outbox relay.
type Relay struct {
	Owner      string `envconfig:"RELAY_OWNER" desc:"lease owner name of this relay; hostname and pid when empty"`
	Batch      int    `envconfig:"RELAY_BATCH" default:"64" desc:"outbox rows claimed per cycle"`
	Publishers int    `envconfig:"RELAY_PUBLISHERS" default:"8" desc:"concurrent publishes within a batch"`
	// Lease bounds how long rows claimed by a relay that died stay reserved.
	Lease time.Duration `envconfig:"RELAY_LEASE" default:"30s" desc:"how long claimed outbox rows stay reserved; a crashed relay delays them by at most this"`
}

// Validate reports the first unusable setting, naming its variable.
func (r Relay) Validate() error {
	if r.Batch < 1 || r.Publishers < 1 {
		return errors.New("RELAY_BATCH and RELAY_PUBLISHERS must be at least 1")
	}
	if r.Lease < time.Second {
		return errors.New("RELAY_LEASE must be at least 1s")
	}
	return nil
}

// DefaultReplayWindow is REPLAY_WINDOW's default (its tag says the same,
// checked by a test), and what package retention and package replay take
// for zero.
const DefaultReplayWindow = 7 * 24 * time.Hour

// minReplayWindow is the shortest REPLAY_WINDOW accepted: RocketMQ keeps
// messages 72 h by default (fileReservedTime) and its timer holds a
// delayed message up to 3 days, so the broker may redeliver an event that
// old, and its inbox row must still be there to deduplicate it.
const minReplayWindow = 72 * time.Hour

// Retention is how long the outbox and the inbox keep their rows: the
// reconcile scan drops their partitions past it, and the replay desk
// refuses to replay an event older than it.
type Retention struct {
	ReplayWindow time.Duration `envconfig:"REPLAY_WINDOW" default:"168h" desc:"published outbox rows and inbox rows are kept at least this long (whole daily partitions are dropped after); a replay of an older event is refused. Set the same on reconcile and the API"`
}

// Validate reports the first unusable setting, naming its variable.
func (r Retention) Validate() error {
	if r.ReplayWindow < minReplayWindow {
		return fmt.Errorf("REPLAY_WINDOW must be at least %s: the broker may redeliver a message that old, and its inbox row must still deduplicate it; got %s",
			minReplayWindow, r.ReplayWindow)
	}
	return nil
}

// The source adapter's defaults: the Source block's (its default tags say
// the same, checked by a test), and what adapter/source, the CloudEvents
// receiver and `go run ./local` take for zero.
const (
	DefaultSourceWorkers        = 16
	DefaultSourceInvisible      = 60 * time.Second
	DefaultSourceHandlerTimeout = 30 * time.Second
)

// Source tunes a source adapter.
type Source struct {
	SinkURL        string        `envconfig:"SOURCE_SINK_URL" desc:"URL of the stage function the adapter delivers to (binary-mode CloudEvents POST)"`
	Workers        int           `envconfig:"SOURCE_WORKERS" default:"16" desc:"concurrent deliveries, at least one per topic the group reads; also bounds prefetch"`
	Invisible      time.Duration `envconfig:"SOURCE_INVISIBLE" default:"60s" desc:"how long a received message stays hidden while delivered; over SOURCE_HANDLER_TIMEOUT"`
	HandlerTimeout time.Duration `envconfig:"SOURCE_HANDLER_TIMEOUT" default:"30s" desc:"bound of one delivery, cold-start retries included"`
	ColdStart      time.Duration `envconfig:"SOURCE_COLD_START" default:"20s" desc:"how long one delivery keeps retrying a function that is scaling from zero"`
}

// Validate reports the first unusable setting, naming its variable.
func (s Source) Validate() error {
	if s.SinkURL != "" {
		if u, err := url.Parse(s.SinkURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") {
			return errors.New("SOURCE_SINK_URL must be an http:// or https:// URL")
		}
	}
	if s.Workers < 1 {
		return errors.New("SOURCE_WORKERS must be at least 1")
	}
	if s.Invisible < 10*time.Second {
		return errors.New("SOURCE_INVISIBLE must be at least 10s (RocketMQ's minimum)")
	}
	if s.HandlerTimeout <= 0 || s.HandlerTimeout >= s.Invisible {
		return errors.New("SOURCE_HANDLER_TIMEOUT must be positive and below SOURCE_INVISIBLE")
	}
	if s.ColdStart <= 0 || s.ColdStart > s.HandlerTimeout {
		return errors.New("SOURCE_COLD_START must be positive and at most SOURCE_HANDLER_TIMEOUT")
	}
	return nil
}

// Provider locates the hosted video-generation API and the secrets that
// authenticate us to it and it to us.
type Provider struct {
	Name    string `envconfig:"PROVIDER_NAME" default:"replicate" desc:"provider client to use; also the {provider} of /v1/provider-callbacks/{provider}"`
	BaseURL string `envconfig:"PROVIDER_BASE_URL" required:"true" desc:"base URL of the provider's API (the simulator's address when running locally)"`
	// APIToken and WebhookSecret come from a Secret in deployments, never a
	// manifest value.
	APIToken      string        `envconfig:"PROVIDER_API_TOKEN" desc:"bearer token for the provider's API"`
	WebhookSecret string        `envconfig:"PROVIDER_WEBHOOK_SECRET" desc:"secret that signs the provider's callbacks; callbacks are refused when empty"`
	CallbackURL   string        `envconfig:"PROVIDER_CALLBACK_URL" desc:"public URL of POST /v1/provider-callbacks/{provider}; empty means poll only"`
	Timeout       time.Duration `envconfig:"PROVIDER_TIMEOUT" default:"15s" desc:"deadline of one provider call; a submit past it counts as accepted-or-not unknown"`
	// The circuit breaker in front of the provider.
	BreakerFailures uint32        `envconfig:"PROVIDER_BREAKER_FAILURES" default:"5" desc:"provider outages in a row that open the circuit"`
	BreakerOpen     time.Duration `envconfig:"PROVIDER_BREAKER_OPEN" default:"30s" desc:"how long an open circuit pauses calls before one trial"`
	// Routes choose, per model, among the configured providers.
	Routes string `envconfig:"PROVIDER_ROUTES" desc:"per model, the providers that can serve it in order of preference: model=provider[:provider-model],...;model=...; empty sends every model to PROVIDER_NAME"`
	// Runway is the second provider, configured when its base URL is set.
	RunwayBaseURL  string `envconfig:"PROVIDER_RUNWAY_BASE_URL" desc:"base URL of Runway's API (https://api.dev.runwayml.com, or the simulator's address); empty leaves Runway out"`
	RunwayAPIToken string `envconfig:"PROVIDER_RUNWAY_API_TOKEN" desc:"bearer token for Runway's API"`
	// What the fetch stage may download as a provider's output.
	FetchMaxBytes            int64 `envconfig:"FETCH_MAX_BYTES" default:"2147483648" desc:"largest provider output the fetch stage stores; a bigger one fails the task fetch.too_large"`
	FetchAllowPrivateOutputs bool  `envconfig:"FETCH_ALLOW_PRIVATE_OUTPUTS" default:"false" desc:"let output downloads use http and reach loopback and private addresses (the local simulators); never in a deployment"`
}

// CallbackURLFor is the callback URL of the named provider: PROVIDER_CALLBACK_URL
// with its {provider} placeholder, or its last path segment when that is
// PROVIDER_NAME, replaced by name; "" (poll only) when there is none.
func (p Provider) CallbackURLFor(name string) string {
	switch {
	case p.CallbackURL == "":
		return ""
	case strings.Contains(p.CallbackURL, "{provider}"):
		return strings.ReplaceAll(p.CallbackURL, "{provider}", url.PathEscape(name))
	case name == p.Name:
		return p.CallbackURL
	case strings.HasSuffix(p.CallbackURL, "/"+p.Name):
		return strings.TrimSuffix(p.CallbackURL, p.Name) + url.PathEscape(name)
	}
	return ""
}

// ParsedRoutes is PROVIDER_ROUTES read; nil when empty.
func (p Provider) ParsedRoutes() (provider.Routes, error) {
	if strings.TrimSpace(p.Routes) == "" {
		return nil, nil
	}
	r, err := provider.ParseRoutes(p.Routes)
	if err != nil {
		return nil, fmt.Errorf("PROVIDER_ROUTES: %w", err)
	}
	return r, nil
}

// Validate reports the first unusable setting, naming its variable.
func (p Provider) Validate() error {
	if p.Name == "" {
		return errors.New("PROVIDER_NAME must not be empty")
	}
	if u, err := url.Parse(p.BaseURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return errors.New("PROVIDER_BASE_URL must be an http:// or https:// URL")
	}
	if p.CallbackURL != "" {
		if u, err := url.Parse(p.CallbackURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return errors.New("PROVIDER_CALLBACK_URL must be an http:// or https:// URL")
		}
	}
	if p.Timeout < time.Second {
		return errors.New("PROVIDER_TIMEOUT must be at least 1s")
	}
	if p.BreakerFailures < 1 || p.BreakerOpen < time.Second {
		return errors.New("PROVIDER_BREAKER_FAILURES must be at least 1 and PROVIDER_BREAKER_OPEN at least 1s")
	}
	if p.RunwayBaseURL != "" {
		if u, err := url.Parse(p.RunwayBaseURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return errors.New("PROVIDER_RUNWAY_BASE_URL must be an http:// or https:// URL")
		}
	}
	if _, err := p.ParsedRoutes(); err != nil {
		return err
	}
	if p.FetchMaxBytes < 1<<20 {
		return errors.New("FETCH_MAX_BYTES must be at least 1048576 (1 MiB)")
	}
	return nil
}

// API tunes the public HTTP API.
type API struct {
	Addr           string        `envconfig:"API_ADDR" default:":8080" desc:"listen address of the public API"`
	MaxBodyBytes   int64         `envconfig:"API_MAX_BODY_BYTES" default:"65536" desc:"largest request body accepted; larger bodies get 413"`
	MaxPromptChars int           `envconfig:"API_MAX_PROMPT_CHARS" default:"4000" desc:"longest prompt accepted, in characters"`
	DownloadTTL    time.Duration `envconfig:"API_DOWNLOAD_URL_TTL" default:"15m" desc:"lifetime of the presigned download URLs the API hands out"`
	UploadTTL      time.Duration `envconfig:"API_UPLOAD_URL_TTL" default:"15m" desc:"lifetime of the presigned upload URLs POST /v1/assets hands out"`
	MaxUploadBytes int64         `envconfig:"API_MAX_UPLOAD_BYTES" default:"2147483648" desc:"largest file a tenant may upload as an asset (one PUT: at most 5 GiB)"`
	// A tenant's own limits (adapter tenants quota) take these' place.
	TenantMaxAssets int64           `envconfig:"API_TENANT_MAX_ASSETS" default:"100000" desc:"most assets (not FAILED) a tenant may keep, uploads, outputs, derivatives and renders alike; past it uploads, generations and renders are refused 409 quota_exceeded"`
	TenantMaxBytes  int64           `envconfig:"API_TENANT_MAX_STORED_BYTES" default:"1099511627776" desc:"most bytes of assets (not FAILED) a tenant may keep; past it uploads, generations and renders are refused 409 quota_exceeded"`
	ShedAfter       time.Duration   `envconfig:"API_SHED_AFTER" default:"2m" desc:"once the oldest unpublished outbox event is older than this (broker down), creates from low-priority tenants get 503; 0 never sheds"`
	ShedBelow       int             `envconfig:"API_SHED_BELOW_PRIORITY" default:"5" desc:"tenants with a priority below this are shed first"`
	TenantRate      map[int]float64 `envconfig:"API_TENANT_RATE" default:"0:10,5:50" desc:"intake limit per priority class, as priority:rate,...: one tenant starts at most rate generations, renders and uploads per second, in the class of the highest priority listed not above its own (the lowest class below every listed one); empty: no limit"`
	TenantBurst     map[int]int     `envconfig:"API_TENANT_BURST" default:"0:100,5:500" desc:"per priority class of API_TENANT_RATE, how many starts one tenant may make at once before its rate applies"`
	Models          []string        `envconfig:"API_MODELS" default:"minimax/video-01,kwaivgi/kling-v2.1,luma/ray-2-720p,wan-video/wan-2.2-t2v-fast" desc:"comma-separated provider models a generation may ask for"`
}

// Validate reports the first unusable setting, naming its variable.
func (a API) Validate() error {
	if a.MaxBodyBytes < 1024 {
		return errors.New("API_MAX_BODY_BYTES must be at least 1024")
	}
	if a.MaxPromptChars < 1 {
		return errors.New("API_MAX_PROMPT_CHARS must be at least 1")
	}
	if len(a.Models) == 0 {
		return errors.New("API_MODELS must name at least one model")
	}
	if a.DownloadTTL < time.Minute || a.DownloadTTL > time.Hour {
		return errors.New("API_DOWNLOAD_URL_TTL must be between 1m and 1h: download links are meant to be short-lived")
	}
	if a.UploadTTL < time.Minute || a.UploadTTL > time.Hour {
		return errors.New("API_UPLOAD_URL_TTL must be between 1m and 1h: upload links are meant to be short-lived")
	}
	if a.MaxUploadBytes < 1 || a.MaxUploadBytes > 5<<30 {
		return errors.New("API_MAX_UPLOAD_BYTES must be from 1 to 5368709120 (5 GiB, the largest single PUT)")
	}
	if err := a.validateIntake(); err != nil {
		return err
	}
	if a.TenantMaxAssets < 1 || a.TenantMaxBytes < 1 {
		return errors.New("API_TENANT_MAX_ASSETS and API_TENANT_MAX_STORED_BYTES must be at least 1 (a single tenant's own limit may be 0: adapter tenants quota)")
	}
	return nil
}

// Journey tunes the generation stages: polling, retries, slots and waits.
type Journey struct {
	PollFirst       time.Duration `envconfig:"POLL_FIRST_DELAY" default:"5s" desc:"wait before the first poll of a provider job the submit's answer shows unfinished (a finished one is polled at once)"`
	PollMax         time.Duration `envconfig:"POLL_MAX_INTERVAL" default:"60s" desc:"longest wait between two polls; intervals grow up to it"`
	MaxWait         time.Duration `envconfig:"GENERATION_MAX_WAIT" default:"30m" desc:"a provider job running longer fails the task"`
	RetryBase       time.Duration `envconfig:"SUBMIT_RETRY_BASE" default:"2s" desc:"first backoff after a provider 429/503, or a missing slot when SCHED_WAITLIST is false"`
	RetryMax        time.Duration `envconfig:"SUBMIT_RETRY_MAX" default:"5m" desc:"backoff cap between submit retries"`
	MaxRetries      int           `envconfig:"SUBMIT_MAX_RETRIES" default:"30" desc:"submit retries before the task fails"`
	ReconcileAfter  time.Duration `envconfig:"RECONCILE_DELAY" default:"20s" desc:"wait before looking for the remote job of a submit whose answer was lost"`
	ReconcileRounds int           `envconfig:"RECONCILE_MAX_ROUNDS" default:"5" desc:"lookups of a lost submit the provider answered (or failed with a 500, 502 or 504) before the task needs attention"`
	// A lookup met by an outage (429, 503, no connection, an open circuit)
	// says nothing about the job: it is not a round.
	ReconcileOutageHorizon time.Duration `envconfig:"RECONCILE_OUTAGE_HORIZON" default:"2h" desc:"a lost submit whose lookups meet provider outages (429, 503, no connection) is looked up again, spaced out, until this long after the submit; then a person decides"`
	SlotsPerTenant         int           `envconfig:"SLOTS_PER_TENANT" default:"8" desc:"provider jobs one tenant may run at once"`
	SlotsPerModel          int           `envconfig:"SLOTS_PER_MODEL" default:"32" desc:"provider jobs of one model at once"`
	SlotsPerProv           int           `envconfig:"SLOTS_PER_PROVIDER" default:"64" desc:"provider jobs at one provider at once"`
	SlotLease              time.Duration `envconfig:"SLOT_LEASE" default:"45m" desc:"a slot not released by then is free again (a crashed stage cannot leak it)"`
	// The wait list of the slots (package waitlist).
	Waitlist       bool          `envconfig:"SCHED_WAITLIST" default:"true" desc:"a submit that finds its slots full waits on the wait list and is woken, in priority order, when a slot frees; false: it retries on a backoff timer alone"`
	PriorityStep   time.Duration `envconfig:"SCHED_PRIORITY_STEP" default:"15s" desc:"the head start on the wait list one point of tenant priority gives: a task that waited this long times the difference passes newer work of a higher priority"`
	AgingMax       time.Duration `envconfig:"SCHED_AGING_MAX" default:"30m" desc:"the largest head start any priority gives, so no task waits longer than this behind newer work for priority alone"`
	WaitFallback   time.Duration `envconfig:"SCHED_WAIT_FALLBACK" default:"2m" desc:"a task on the wait list also retries after this long, in case its wake-up is lost"`
	FetchRetryBase time.Duration `envconfig:"FETCH_RETRY_BASE" default:"2s" desc:"first wait before fetching again an output the provider has not made ready (or answered 429/503 for)"`
	FetchRetryMax  time.Duration `envconfig:"FETCH_RETRY_MAX" default:"1m" desc:"longest wait between two fetches of an output that is not ready; waits grow up to it"`
	FetchMaxWait   time.Duration `envconfig:"FETCH_MAX_WAIT" default:"15m" desc:"an output still not ready this long after the first try fails the task"`
	ScanGrace      time.Duration `envconfig:"RECONCILE_SCAN_GRACE" default:"2m" desc:"how far past its due time a task must be before the scanner re-emits its event"`
	StuckAfter     time.Duration `envconfig:"RECONCILE_STUCK_AFTER" default:"15m" desc:"a task fetching or processing media this long without change gets its step re-emitted"`
	GiveUpAfter    time.Duration `envconfig:"RECONCILE_GIVE_UP_AFTER" default:"30m" desc:"a render whose re-asked steps the render stage took without it progressing is FAILED render.stuck only once it has not progressed for this long"`
	OutboxStale    time.Duration `envconfig:"OUTBOX_STALE_AFTER" default:"5m" desc:"an unpublished outbox row this old is reported (metric and log) for alerting"`
	UploadExpiry   time.Duration `envconfig:"UPLOAD_EXPIRY" default:"24h" desc:"an announced upload not completed this long after is FAILED (upload.expired)"`
	// Live progress goes to Redis on every poll and into PostgreSQL only
	// by these (seed 7.8.2; package progress).
	ProgressStep     int           `envconfig:"PROGRESS_MERGE_STEP" default:"10" desc:"a running job's progress is written to PostgreSQL when it moved at least this many points (1..100) since the stored value"`
	ProgressInterval time.Duration `envconfig:"PROGRESS_MERGE_INTERVAL" default:"30s" desc:"a running job's progress that changed is written to PostgreSQL once this long has passed since its last write, whatever the step"`
}

// The progress merge's defaults: PROGRESS_MERGE_STEP's and
// PROGRESS_MERGE_INTERVAL's (their default tags say the same, checked by a
// test), and what package progress takes for zero.
const (
	DefaultProgressStep     = 10
	DefaultProgressInterval = 30 * time.Second
)

// Validate reports the first unusable setting, naming its variable.
func (j Journey) Validate() error {
	switch {
	case j.PollFirst <= 0 || j.PollMax < j.PollFirst:
		return errors.New("POLL_FIRST_DELAY must be positive and POLL_MAX_INTERVAL at least as long")
	case j.MaxWait < j.PollMax:
		return errors.New("GENERATION_MAX_WAIT must be at least POLL_MAX_INTERVAL")
	case j.RetryBase <= 0 || j.RetryMax < j.RetryBase:
		return errors.New("SUBMIT_RETRY_BASE must be positive and SUBMIT_RETRY_MAX at least as long")
	case j.MaxRetries < 1 || j.ReconcileRounds < 1:
		return errors.New("SUBMIT_MAX_RETRIES and RECONCILE_MAX_ROUNDS must be at least 1")
	case j.FetchRetryBase <= 0 || j.FetchRetryMax < j.FetchRetryBase || j.FetchMaxWait < j.FetchRetryMax:
		return errors.New("FETCH_RETRY_BASE must be positive, FETCH_RETRY_MAX at least as long, and FETCH_MAX_WAIT at least FETCH_RETRY_MAX")
	case j.ReconcileAfter <= 0:
		return errors.New("RECONCILE_DELAY must be positive")
	case j.ReconcileOutageHorizon < 0:
		return errors.New("RECONCILE_OUTAGE_HORIZON must not be negative")
	case j.SlotsPerTenant < 1 || j.SlotsPerModel < 1 || j.SlotsPerProv < 1:
		return errors.New("SLOTS_PER_TENANT, SLOTS_PER_MODEL and SLOTS_PER_PROVIDER must be at least 1")
	case j.ScanGrace <= 0 || j.StuckAfter <= 0 || j.OutboxStale <= 0 || j.UploadExpiry <= 0:
		return errors.New("RECONCILE_SCAN_GRACE, RECONCILE_STUCK_AFTER, OUTBOX_STALE_AFTER and UPLOAD_EXPIRY must be positive")
	case j.ProgressStep < 1 || j.ProgressStep > 100:
		return fmt.Errorf("PROGRESS_MERGE_STEP must be from 1 to 100, got %d", j.ProgressStep)
	case j.ProgressInterval < time.Second:
		return fmt.Errorf("PROGRESS_MERGE_INTERVAL must be at least 1s, got %s", j.ProgressInterval)
	case j.PriorityStep < 0 || j.AgingMax < 0 || j.WaitFallback <= 0:
		return errors.New("SCHED_PRIORITY_STEP and SCHED_AGING_MAX must not be negative, and SCHED_WAIT_FALLBACK must be positive")
	case j.SlotLease < j.MaxWait:
		return errors.New("SLOT_LEASE must be at least GENERATION_MAX_WAIT, or a slot could expire under a running job")
	}
	return nil
}

// validateIntake checks that API_TENANT_RATE and API_TENANT_BURST name the
// same priority classes, each with a usable limit.
func (a API) validateIntake() error {
	if len(a.TenantRate) != len(a.TenantBurst) {
		return fmt.Errorf("API_TENANT_RATE and API_TENANT_BURST must list the same priority classes; they list %d and %d", len(a.TenantRate), len(a.TenantBurst))
	}
	for class, rate := range a.TenantRate {
		burst, ok := a.TenantBurst[class]
		switch {
		case !ok:
			return fmt.Errorf("API_TENANT_BURST has no burst for priority class %d of API_TENANT_RATE", class)
		case rate <= 0 || rate > 1e6:
			return fmt.Errorf("API_TENANT_RATE of priority class %d must be above 0 and at most 1000000 per second, not %g (to lift the limit, set API_TENANT_RATE and API_TENANT_BURST empty)", class, rate)
		case burst < 1:
			return fmt.Errorf("API_TENANT_BURST of priority class %d must be at least 1, not %d", class, burst)
		}
	}
	return nil
}
