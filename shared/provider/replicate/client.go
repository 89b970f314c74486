package replicate

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"

	"github.com/aivedio/pipeline/shared/provider"
)

// Defaults applied by [New] to zero [Config] fields.
const (
	DefaultBaseURL         = "https://api.replicate.com"
	DefaultName            = "replicate"
	DefaultTimeout         = 15 * time.Second
	DefaultOutputRetention = time.Hour
	DefaultMaxFindPages    = 50
	DefaultFindClockSkew   = time.Minute
)

// maxBodyBytes bounds what one API answer may take in memory. A prediction
// is a few KiB; a page of 100 is well under this.
const maxBodyBytes = 4 << 20

// Config configures a [Client].
type Config struct {
	// Name is returned by Name; DefaultName when empty.
	Name string
	// BaseURL is the API's origin, without /v1; DefaultBaseURL when empty.
	BaseURL string
	// APIToken is sent as "Authorization: Bearer <token>".
	APIToken string
	// WebhookSecret is the "whsec_<base64>" signing secret
	// (GET /v1/webhooks/default/secret). ParseCallback refuses every
	// callback while it is empty.
	WebhookSecret string
	// Timeout bounds one API call when ctx allows longer; for Download it
	// bounds the wait for response headers only, never the stream.
	Timeout time.Duration
	// OutputRetention is how long after completion an output stays
	// downloadable; Replicate's documented retention is one hour.
	OutputRetention time.Duration
	// MaxFindPages bounds the pages FindByClientRequestID reads.
	MaxFindPages int
	// FindClockSkew widens FindByClientRequestID's window to the past, so a
	// provider clock behind ours does not hide the job.
	FindClockSkew time.Duration
	// TrustedOutputHosts are the hosts (and their subdomains) that Download
	// sends the API token to; the API host is always trusted. Nil means
	// replicate.delivery, whose file URLs may ask for the token.
	TrustedOutputHosts []string
	// Outputs bounds output downloads: https only, to public addresses,
	// under a size cap, unless it says otherwise.
	Outputs provider.OutputGuard
	// HTTPClient makes the requests. Its Timeout must be zero, or it cuts
	// downloads short. Downloads through it keep the Outputs scheme and
	// size checks, not the connect-time address check. Nil means a client of its own.
	HTTPClient *http.Client
	// InputFunc builds the model input from a request; nil means
	// DefaultInput. Video models name their inputs differently.
	InputFunc func(provider.SubmitRequest) map[string]any
	// NowFunc is the clock; nil means time.Now.
	NowFunc func() time.Time
	// Logger receives warnings about answers that break the format; nil
	// discards them.
	Logger *slog.Logger
}

// Client is the Replicate [provider.Client]. It is safe for concurrent use.
type Client struct {
	name         string
	base         *url.URL
	token        string
	webhookKey   []byte
	timeout      time.Duration
	retention    time.Duration
	maxPages     int
	skew         time.Duration
	trustedHosts []string
	http         *http.Client
	download     *http.Client
	outputs      provider.OutputGuard
	input        func(provider.SubmitRequest) map[string]any
	now          func() time.Time
	log          *slog.Logger
}

var _ provider.Client = (*Client)(nil)

// New checks cfg and returns a client.
func New(cfg Config) (*Client, error) {
	c := &Client{
		name:         orDefault(cfg.Name, DefaultName),
		token:        cfg.APIToken,
		timeout:      orDefaultDuration(cfg.Timeout, DefaultTimeout),
		retention:    orDefaultDuration(cfg.OutputRetention, DefaultOutputRetention),
		maxPages:     cfg.MaxFindPages,
		skew:         orDefaultDuration(cfg.FindClockSkew, DefaultFindClockSkew),
		trustedHosts: cfg.TrustedOutputHosts,
		http:         cfg.HTTPClient,
		download:     cfg.HTTPClient,
		outputs:      cfg.Outputs,
		input:        cfg.InputFunc,
		now:          cfg.NowFunc,
		log:          cfg.Logger,
	}
	base, err := url.Parse(orDefault(cfg.BaseURL, DefaultBaseURL))
	if err != nil || (base.Scheme != "http" && base.Scheme != "https") || base.Host == "" {
		return nil, errors.New("replicate base URL must be an absolute http(s) URL")
	}
	base.Path = strings.TrimRight(base.Path, "/")
	base.RawQuery, base.Fragment = "", ""
	c.base = base
	if cfg.WebhookSecret != "" {
		if c.webhookKey, err = decodeSecret(cfg.WebhookSecret); err != nil {
			return nil, err
		}
	}
	if c.maxPages <= 0 {
		c.maxPages = DefaultMaxFindPages
	}
	if c.trustedHosts == nil {
		c.trustedHosts = []string{"replicate.delivery"}
	}
	if c.http == nil {
		// Traced: every call is a client span of the stage's, and carries
		// the traceparent header.
		c.http = &http.Client{Transport: otelhttp.NewTransport(http.DefaultTransport.(*http.Transport).Clone(),
			otelhttp.WithSpanNameFormatter(func(_ string, r *http.Request) string { return "replicate " + r.Method }))}
	}
	if c.download == nil {
		c.download = cfg.Outputs.Client(func(rt http.RoundTripper) http.RoundTripper {
			return otelhttp.NewTransport(rt, otelhttp.WithSpanNameFormatter(func(_ string, r *http.Request) string { return "replicate download " + r.Method }))
		})
	}
	if c.input == nil {
		c.input = DefaultInput
	}
	if c.now == nil {
		c.now = time.Now
	}
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	return c, nil
}

// Name returns the provider's name.
func (c *Client) Name() string { return c.name }

// CloseIdleConnections closes the HTTP client's idle connections, so a
// client that is done leaves no connection goroutines behind.
func (c *Client) CloseIdleConnections() {
	c.http.CloseIdleConnections()
	c.download.CloseIdleConnections()
}

// DefaultInput is the input most hosted video models take: prompt,
// duration in seconds and resolution as WIDTHxHEIGHT.
func DefaultInput(req provider.SubmitRequest) map[string]any {
	in := map[string]any{"prompt": req.Prompt}
	if req.DurationSeconds > 0 {
		in["duration"] = req.DurationSeconds
	}
	if req.Resolution != "" {
		in["resolution"] = req.Resolution
	}
	return in
}

// apiCall is one JSON request to the API.
type apiCall struct {
	op     string // names the call in errors: "create prediction"
	method string
	url    string
	body   []byte
	header http.Header
	// submit marks a call whose lost answer leaves the remote state
	// unknown: it may have started a job.
	submit bool
	// scrub removes user data from provider messages quoted in errors.
	scrub func(string) string
}

// reply is a 2xx answer.
type reply struct {
	status int
	body   []byte
}

// roundTrip makes call and returns its 2xx answer, or a classified error.
func (c *Client) roundTrip(ctx context.Context, call apiCall) (reply, error) {
	header := http.Header{"Accept": {"application/json"}, "User-Agent": {"aivedio-pipeline/replicate"}}
	for k, v := range call.header {
		header[k] = v
	}
	if c.token != "" {
		header.Set("Authorization", "Bearer "+c.token)
	}
	// Replicate ignores the Idempotency-Key it is sent, so a create is
	// marked Creates: a lost answer may have started a prediction.
	ans, err := provider.Exchange(ctx, c.http, provider.ExchangeParams{
		Op: call.op, Method: call.method, URL: call.url, Body: call.body, Header: header,
		Creates: call.submit, Timeout: c.timeout, MaxBody: maxBodyBytes,
	})
	switch {
	case errors.Is(err, provider.ErrAnswerTooLarge):
		return reply{}, c.malformed(call.op, ans.Status, errors.New("answer larger than 4 MiB"))
	case err != nil:
		return reply{}, err
	case !ans.OK():
		return reply{}, statusError(call.op, ans.Status, ans.Header, ans.Body, c.now(), call.scrub)
	}
	return reply{status: ans.Status, body: ans.Body}, nil
}

// malformed reports an answer that breaks the documented format, and logs
// it: the provider changed, or something in between rewrote the answer.
func (c *Client) malformed(op string, status int, err error) *provider.Error {
	c.log.Warn("provider answer does not match its format",
		slog.String("provider", c.name), slog.String("op", op), slog.Int("status_code", status), slog.String("error", err.Error()))
	return &provider.Error{Class: provider.ClassMalformed, StatusCode: status, Message: op, Err: err}
}

// endpoint returns the API URL of path, which starts with /v1/ and holds
// only checked or escaped segments.
func (c *Client) endpoint(path string, query url.Values) string {
	s := c.base.String() + path
	if len(query) > 0 {
		s += "?" + query.Encode()
	}
	return s
}

// sameOrigin reports whether u is on the API's scheme and host, so a
// pagination link cannot carry the token elsewhere.
func (c *Client) sameOrigin(u *url.URL) bool {
	return strings.EqualFold(u.Scheme, c.base.Scheme) && strings.EqualFold(u.Host, c.base.Host)
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func orDefaultDuration(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}

// checkID refuses ids that would change the request path.
func checkID(op, id string) error {
	if id == "" || strings.ContainsAny(id, "/?#%") || strings.TrimSpace(id) != id {
		return &provider.Error{Class: provider.ClassRejected, Message: fmt.Sprintf("%s: invalid prediction id", op)}
	}
	return nil
}
