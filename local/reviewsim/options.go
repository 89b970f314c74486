package reviewsim

import (
	"errors"
	"flag"
	"fmt"
	"strconv"
	"time"
)

// Options are the simulator's knobs. Each is an environment variable
// (REVIEWSIM_ + upper snake case) and a flag (-reviewsim-<name>).
type Options struct {
	// Secret is the HMAC-SHA256 key requests must be signed with
	// (REVIEW_SECRET on the pipeline's side).
	Secret string
	// RejectRate is the share of well-formed requests rejected.
	RejectRate float64
	// Rate5xx is the share answered 503, Rate429 the share answered 429
	// with RetryAfter, RateMalformed the share answered 200 with no
	// decision.
	Rate5xx, Rate429, RateMalformed float64
	RetryAfter                      time.Duration
	// Latency delays every answer.
	Latency time.Duration
	// Down refuses every review request: the connection is closed without
	// an answer. /sim/* keeps answering, so a test can bring it back.
	Down bool
	// Seed seeds every random choice; 0 seeds from the clock.
	Seed int64
	// FrameTimeout bounds the fetch of one frame URL.
	FrameTimeout time.Duration
}

// DefaultOptions approve everything, at once.
func DefaultOptions() Options {
	return Options{Secret: "reviewsim-local-secret", Seed: 1, RetryAfter: time.Second, FrameTimeout: 10 * time.Second}
}

type knob struct {
	name, env, usage string
	set              func(o *Options, v string) error
	get              func(o *Options) string
}

func knobs() []knob {
	rate := func(name, usage string, f func(*Options) *float64) knob {
		return knob{name: name, env: env(name), usage: usage,
			set: func(o *Options, v string) error {
				r, err := strconv.ParseFloat(v, 64)
				if err != nil {
					return err
				}
				if r < 0 || r > 1 {
					return errors.New("must be in [0, 1]")
				}
				*f(o) = r
				return nil
			},
			get: func(o *Options) string { return strconv.FormatFloat(*f(o), 'g', -1, 64) }}
	}
	dur := func(name, usage string, f func(*Options) *time.Duration) knob {
		return knob{name: name, env: env(name), usage: usage,
			set: func(o *Options, v string) error {
				d, err := time.ParseDuration(v)
				if err == nil {
					*f(o) = d
				}
				return err
			},
			get: func(o *Options) string { return f(o).String() }}
	}
	return []knob{
		{name: "secret", env: env("secret"), usage: "HMAC-SHA256 secret requests must be signed with (the pipeline's REVIEW_SECRET)",
			set: func(o *Options, v string) error { o.Secret = v; return nil }, get: func(*Options) string { return "" }},
		rate("reject-rate", "share of requests rejected", func(o *Options) *float64 { return &o.RejectRate }),
		rate("rate-5xx", "share of requests answered 503", func(o *Options) *float64 { return &o.Rate5xx }),
		rate("rate-429", "share of requests answered 429 with Retry-After", func(o *Options) *float64 { return &o.Rate429 }),
		rate("rate-malformed", "share of requests answered 200 with no decision", func(o *Options) *float64 { return &o.RateMalformed }),
		dur("retry-after", "Retry-After of a 429, whole seconds", func(o *Options) *time.Duration { return &o.RetryAfter }),
		dur("latency", "delay before every answer", func(o *Options) *time.Duration { return &o.Latency }),
		dur("frame-timeout", "bound of fetching one frame URL", func(o *Options) *time.Duration { return &o.FrameTimeout }),
		{name: "down", env: env("down"), usage: "refuse every review request (close the connection unanswered)",
			set: func(o *Options, v string) error {
				b, err := strconv.ParseBool(v)
				if err == nil {
					o.Down = b
				}
				return err
			}, get: func(o *Options) string { return strconv.FormatBool(o.Down) }},
		{name: "seed", env: env("seed"), usage: "seed of every random choice; 0 seeds from the clock",
			set: func(o *Options, v string) error {
				n, err := strconv.ParseInt(v, 10, 64)
				if err == nil {
					o.Seed = n
				}
				return err
			}, get: func(o *Options) string { return strconv.FormatInt(o.Seed, 10) }},
	}
}

func env(name string) string {
	b := []byte("REVIEWSIM_")
	for _, c := range []byte(name) {
		switch {
		case c == '-':
			b = append(b, '_')
		case c >= 'a' && c <= 'z':
			b = append(b, c-'a'+'A')
		default:
			b = append(b, c)
		}
	}
	return string(b)
}

// LoadEnv sets every knob whose variable getenv returns non-empty.
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

// RegisterFlags adds a -reviewsim-<knob> flag for every knob, defaulting to
// o's current value.
func (o *Options) RegisterFlags(fs *flag.FlagSet) {
	for _, k := range knobs() {
		fs.Func("reviewsim-"+k.name, fmt.Sprintf("reviewer simulator: %s (env %s, default %q)", k.usage, k.env, k.get(o)), func(v string) error {
			return k.set(o, v)
		})
	}
}

// Validate reports knobs that cannot work.
func (o Options) Validate() error {
	var errs []error
	if o.Secret == "" {
		errs = append(errs, errors.New("reviewsim secret must not be empty: requests are verified against it"))
	}
	if o.Rate5xx+o.Rate429+o.RateMalformed+o.RejectRate > 1 {
		errs = append(errs, errors.New("reviewsim rate-5xx, rate-429, rate-malformed and reject-rate add up to more than 1"))
	}
	if o.Latency < 0 || o.RetryAfter < 0 || o.FrameTimeout <= 0 {
		errs = append(errs, errors.New("reviewsim latency and retry-after must not be negative, frame-timeout must be positive"))
	}
	return errors.Join(errs...)
}
