package providersim

import (
	"errors"
	"flag"
	"fmt"
	"strconv"
	"time"

	"github.com/aivedio/pipeline/shared/provider/replicate"
	"github.com/aivedio/pipeline/shared/provider/runway"
)

// Drop modes for [Options.DropMode].
const (
	// DropClose closes the connection once the job exists.
	DropClose = "close"
	// DropHang holds the request open, answering nothing, until the
	// client gives up or the simulator closes.
	DropHang = "hang"
)

// Options are the simulator's knobs. Rates are probabilities in [0, 1],
// rolled once per request (or per job for RateFail) from one seeded source.
type Options struct {
	// APIToken, when set, is required as "Authorization: Bearer <token>"
	// on every /v1 request.
	APIToken string
	// WebhookSecret signs webhooks ("whsec_<base64>"); New makes one when
	// it is empty. GET /v1/webhooks/default/secret returns it.
	WebhookSecret string

	// Rate429 answers a /v1 request 429 with Retry-After: RetryAfter in
	// whole seconds.
	Rate429    float64
	RetryAfter time.Duration
	// Rate5xx answers a /v1 request 503.
	Rate5xx float64
	// RateDrop creates the job a submit asks for and then answers
	// nothing, as DropMode says.
	RateDrop float64
	DropMode string
	// JobDurationMin and JobDurationMax bound how long a job runs, drawn
	// uniformly.
	JobDurationMin time.Duration
	JobDurationMax time.Duration
	// RateFail makes a job end failed instead of succeeded.
	RateFail float64
	// OutputNotReady is how long after success the output URL answers 404.
	OutputNotReady time.Duration
	// OutputTTL is how long after success the output stays; after it the
	// prediction shows data_removed and the file answers 410. Zero means
	// Replicate's one hour.
	OutputTTL time.Duration
	// Seed seeds every random choice; zero seeds from the clock.
	Seed int64

	// RateContentRejectSubmit refuses a create for content policy (Replicate:
	// 422 with E005; Runway: 400 with failureCode SAFETY.INPUT.TEXT); no job
	// is made. A prompt containing [MarkerContentRejectedAtSubmit] is always
	// refused.
	RateContentRejectSubmit float64
	// RateContentFail makes a job end failed for content policy (Replicate:
	// error E005; Runway: failureCode SAFETY.OUTPUT.VIDEO), rolled per job. A
	// prompt containing [MarkerContentRejectedOutput] always fails so.
	RateContentFail float64
	// ThrottleAbove is Runway's concurrency limit: a Runway task created
	// while this many Runway tasks are unfinished stays THROTTLED for
	// ThrottleFor before it is enqueued (PENDING, then RUNNING). Zero never
	// throttles. Replicate has no such state.
	ThrottleAbove int
	ThrottleFor   time.Duration
	// RunwayVersion is the X-Runway-Version every Runway request must carry.
	RunwayVersion string
	// HonorIdempotencyKey answers a Replicate create repeated under the
	// same Idempotency-Key with the job the first one started. Replicate
	// documents no such key, so by default the simulator behaves as
	// Replicate does: it ignores the header and every create it receives
	// is a new (paid) job. The counts per key in [Stats] then show every
	// resend.
	HonorIdempotencyKey bool

	// MaxJobs bounds the jobs kept; the oldest finished job makes room,
	// and a submit with every slot running is answered 429.
	MaxJobs int
	// PageSize is the list page length; Replicate's is 100.
	PageSize int
	// WebhookWorkers deliver webhooks; WebhookQueue bounds the waiting
	// ones (more are dropped and counted); WebhookAttempts and
	// WebhookBackoff (doubling) shape retries.
	WebhookWorkers  int
	WebhookQueue    int
	WebhookAttempts int
	WebhookBackoff  time.Duration

	// FFmpegPath runs ffmpeg; "ffmpeg" finds it on PATH.
	FFmpegPath string
	// CacheDir keeps generated MP4s across runs; empty means
	// [DefaultCacheDir], a folder of this user's own.
	CacheDir string
	// StateFile keeps the jobs, and the counts of jobs per key, across
	// runs: a job running when the process died goes on (it is a schedule)
	// and its completion webhook is sent after the restart. Empty keeps
	// them in memory.
	StateFile string
	// MaxOutputSide scales outputs down to at most this many pixels a
	// side, keeping the requested aspect ratio.
	MaxOutputSide int
	// ClientRequestIDParam is the webhook URL query parameter the client
	// puts its request id in; stats count jobs by it.
	ClientRequestIDParam string
}

// DefaultOptions is a calm provider: no faults, jobs of 2–5 s, outputs
// ready on success and kept for an hour.
func DefaultOptions() Options {
	return Options{
		RetryAfter:           time.Second,
		DropMode:             DropClose,
		JobDurationMin:       2 * time.Second,
		JobDurationMax:       5 * time.Second,
		OutputTTL:            time.Hour,
		Seed:                 1,
		ThrottleFor:          time.Second,
		RunwayVersion:        runway.DefaultAPIVersion,
		MaxJobs:              1000,
		PageSize:             100,
		WebhookWorkers:       2,
		WebhookQueue:         256,
		WebhookAttempts:      4,
		WebhookBackoff:       250 * time.Millisecond,
		FFmpegPath:           "ffmpeg",
		MaxOutputSide:        320,
		ClientRequestIDParam: replicate.ClientRequestIDParam,
	}
}

// knob is one option as an environment variable and a flag.
type knob struct {
	name  string // flag name; the variable is PROVIDERSIM_ + upper snake case
	env   string
	usage string
	set   func(o *Options, v string) error
	get   func(o *Options) string
}

func knobs() []knob {
	return []knob{
		stringKnob("api-token", "PROVIDERSIM_API_TOKEN", "bearer token /v1 requests must carry; empty accepts any", func(o *Options) *string { return &o.APIToken }),
		stringKnob("webhook-secret", "PROVIDERSIM_WEBHOOK_SECRET", "whsec_ secret that signs webhooks; empty makes one", func(o *Options) *string { return &o.WebhookSecret }),
		rateKnob("rate-429", "PROVIDERSIM_RATE_429", "share of /v1 requests answered 429", func(o *Options) *float64 { return &o.Rate429 }),
		durationKnob("retry-after", "PROVIDERSIM_RETRY_AFTER", "Retry-After of a 429, whole seconds", func(o *Options) *time.Duration { return &o.RetryAfter }),
		rateKnob("rate-5xx", "PROVIDERSIM_RATE_5XX", "share of /v1 requests answered 503", func(o *Options) *float64 { return &o.Rate5xx }),
		rateKnob("rate-drop", "PROVIDERSIM_RATE_DROP", "share of submits whose job is created but whose answer is dropped", func(o *Options) *float64 { return &o.RateDrop }),
		stringKnob("drop-mode", "PROVIDERSIM_DROP_MODE", "how an answer is dropped: close or hang", func(o *Options) *string { return &o.DropMode }),
		durationKnob("job-duration-min", "PROVIDERSIM_JOB_DURATION_MIN", "shortest job", func(o *Options) *time.Duration { return &o.JobDurationMin }),
		durationKnob("job-duration-max", "PROVIDERSIM_JOB_DURATION_MAX", "longest job", func(o *Options) *time.Duration { return &o.JobDurationMax }),
		rateKnob("rate-fail", "PROVIDERSIM_RATE_FAIL", "share of jobs that end failed", func(o *Options) *float64 { return &o.RateFail }),
		durationKnob("output-not-ready", "PROVIDERSIM_OUTPUT_NOT_READY", "time after success during which the output answers 404", func(o *Options) *time.Duration { return &o.OutputNotReady }),
		durationKnob("output-ttl", "PROVIDERSIM_OUTPUT_TTL", "time after success the output is kept", func(o *Options) *time.Duration { return &o.OutputTTL }),
		{
			name: "seed", env: "PROVIDERSIM_SEED", usage: "seed of every random choice; 0 seeds from the clock",
			set: func(o *Options, v string) error {
				n, err := strconv.ParseInt(v, 10, 64)
				if err == nil {
					o.Seed = n
				}
				return err
			},
			get: func(o *Options) string { return strconv.FormatInt(o.Seed, 10) },
		},
		rateKnob("rate-content-reject-submit", "PROVIDERSIM_RATE_CONTENT_REJECT_SUBMIT", "share of creates refused for content policy (no job is made)", func(o *Options) *float64 { return &o.RateContentRejectSubmit }),
		rateKnob("rate-content-fail", "PROVIDERSIM_RATE_CONTENT_FAIL", "share of jobs that end failed for content policy", func(o *Options) *float64 { return &o.RateContentFail }),
		intKnob("throttle-above", "PROVIDERSIM_THROTTLE_ABOVE", "Runway tasks created while this many are unfinished start THROTTLED; 0 never", func(o *Options) *int { return &o.ThrottleAbove }),
		durationKnob("throttle-for", "PROVIDERSIM_THROTTLE_FOR", "how long a throttled Runway task stays THROTTLED", func(o *Options) *time.Duration { return &o.ThrottleFor }),
		{
			name: "honor-idempotency-key", env: "PROVIDERSIM_HONOR_IDEMPOTENCY_KEY",
			usage: "answer a Replicate create repeated under one Idempotency-Key with the first one's job (real Replicate documents no such key and makes a new job)",
			set: func(o *Options, v string) error {
				b, err := strconv.ParseBool(v)
				if err == nil {
					o.HonorIdempotencyKey = b
				}
				return err
			},
			get: func(o *Options) string { return strconv.FormatBool(o.HonorIdempotencyKey) },
		},
		stringKnob("runway-version", "PROVIDERSIM_RUNWAY_VERSION", "X-Runway-Version Runway requests must carry", func(o *Options) *string { return &o.RunwayVersion }),
		intKnob("max-jobs", "PROVIDERSIM_MAX_JOBS", "jobs kept in memory", func(o *Options) *int { return &o.MaxJobs }),
		stringKnob("cache-dir", "PROVIDERSIM_CACHE_DIR", "folder of generated MP4s; empty means aivedio-providersim-<uid> in the temp dir", func(o *Options) *string { return &o.CacheDir }),
		stringKnob("ffmpeg", "PROVIDERSIM_FFMPEG", "ffmpeg binary", func(o *Options) *string { return &o.FFmpegPath }),
	}
}

// LoadEnv sets every knob whose variable getenv returns non-empty, e.g.
// o.LoadEnv(config.Getenv). Variables are named in the flags' usage.
func (o *Options) LoadEnv(getenv func(string) string) error {
	var errs []error
	for _, k := range knobs() {
		if v := getenv(k.env); v != "" {
			if err := k.set(o, v); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", k.env, err))
			}
		}
	}
	return errors.Join(errs...)
}

// RegisterFlags adds a -providersim-<knob> flag for every knob, defaulting
// to o's current value (so flags parsed after LoadEnv override the
// environment).
func (o *Options) RegisterFlags(fs *flag.FlagSet) {
	for _, k := range knobs() {
		fs.Func("providersim-"+k.name, fmt.Sprintf("provider simulator: %s (env %s, default %q)", k.usage, k.env, k.get(o)), func(v string) error {
			return k.set(o, v)
		})
	}
}

// Validate reports knobs that cannot work, naming them.
func (o Options) Validate() error {
	var errs []error
	for name, r := range map[string]float64{"rate-429": o.Rate429, "rate-5xx": o.Rate5xx, "rate-drop": o.RateDrop, "rate-fail": o.RateFail,
		"rate-content-reject-submit": o.RateContentRejectSubmit, "rate-content-fail": o.RateContentFail} {
		if r < 0 || r > 1 {
			errs = append(errs, fmt.Errorf("providersim %s must be in [0, 1]", name))
		}
	}
	if o.DropMode != "" && o.DropMode != DropClose && o.DropMode != DropHang {
		errs = append(errs, errors.New("providersim drop-mode must be close or hang"))
	}
	if o.JobDurationMin < 0 || o.JobDurationMax < o.JobDurationMin {
		errs = append(errs, errors.New("providersim job-duration-min must be >= 0 and <= job-duration-max"))
	}
	if o.RetryAfter < 0 || o.OutputNotReady < 0 || o.OutputTTL < 0 || o.ThrottleFor < 0 {
		errs = append(errs, errors.New("providersim retry-after, output-not-ready, output-ttl and throttle-for must not be negative"))
	}
	if o.ThrottleAbove < 0 {
		errs = append(errs, errors.New("providersim throttle-above must not be negative"))
	}
	return errors.Join(errs...)
}

func stringKnob(name, env, usage string, field func(*Options) *string) knob {
	return knob{name: name, env: env, usage: usage,
		set: func(o *Options, v string) error { *field(o) = v; return nil },
		get: func(o *Options) string {
			if name == "api-token" || name == "webhook-secret" {
				return "" // never print a secret in -help
			}
			return *field(o)
		},
	}
}

func rateKnob(name, env, usage string, field func(*Options) *float64) knob {
	return knob{name: name, env: env, usage: usage,
		set: func(o *Options, v string) error {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return err
			}
			if f < 0 || f > 1 {
				return errors.New("must be in [0, 1]")
			}
			*field(o) = f
			return nil
		},
		get: func(o *Options) string { return strconv.FormatFloat(*field(o), 'g', -1, 64) },
	}
}

func durationKnob(name, env, usage string, field func(*Options) *time.Duration) knob {
	return knob{name: name, env: env, usage: usage,
		set: func(o *Options, v string) error {
			d, err := time.ParseDuration(v)
			if err != nil {
				return err
			}
			*field(o) = d
			return nil
		},
		get: func(o *Options) string { return field(o).String() },
	}
}

func intKnob(name, env, usage string, field func(*Options) *int) knob {
	return knob{name: name, env: env, usage: usage,
		set: func(o *Options, v string) error {
			n, err := strconv.Atoi(v)
			if err == nil {
				*field(o) = n
			}
			return err
		},
		get: func(o *Options) string { return strconv.Itoa(*field(o)) },
	}
}
