package runway

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
	DefaultBaseURL = "https://api.dev.runwayml.com"
	DefaultName    = "runway"
	// DefaultAPIVersion is the X-Runway-Version this client was written
	// against; Runway refuses requests without the header.
	DefaultAPIVersion = "2024-11-06"
	DefaultTimeout    = 15 * time.Second
	// DefaultOutputRetention is the lower end of the 24–48 hours Runway
	// documents for its output URLs, used when a URL's own expiry cannot
	// be read.
	DefaultOutputRetention = 24 * time.Hour
)

// VersionHeader is the header that pins Runway's API version.
const VersionHeader = "X-Runway-Version"

// maxBodyBytes bounds what one API answer may take in memory; a task is
// well under a KiB.
const maxBodyBytes = 1 << 20

// Config configures a [Client].
type Config struct {
	// Name is returned by Name; DefaultName when empty.
	Name string
	// BaseURL is the API's origin, without /v1; DefaultBaseURL when empty.
	BaseURL string
	// APIToken is the API key, sent as "Authorization: Bearer <key>".
	APIToken string
	// APIVersion is sent as X-Runway-Version; DefaultAPIVersion when empty.
	APIVersion string
	// Timeout bounds one API call when ctx allows longer; for Download it
	// bounds the wait for response headers only, never the stream.
	Timeout time.Duration
	// OutputRetention is how long an output URL is taken to live after the
	// answer that gave it, when the URL carries no readable expiry.
	OutputRetention time.Duration
	// Outputs bounds output downloads: https only, to public addresses,
	// under a size cap, unless it says otherwise.
	Outputs provider.OutputGuard
	// HTTPClient makes the requests. Its Timeout must be zero, or it cuts
	// downloads short. Downloads through it keep the Outputs scheme and
	// size checks, not the connect-time address check. Nil means a traced client of its own.
	HTTPClient *http.Client
	// NowFunc is the clock; nil means time.Now.
	NowFunc func() time.Time
	// Logger receives warnings about answers that break the format; nil
	// discards them.
	Logger *slog.Logger
}

// Client is the Runway [provider.Client]. It is safe for concurrent use.
type Client struct {
	name      string
	base      *url.URL
	token     string
	version   string
	timeout   time.Duration
	retention time.Duration
	http      *http.Client
	download  *http.Client
	outputs   provider.OutputGuard
	now       func() time.Time
	log       *slog.Logger
}

var (
	_ provider.Client  = (*Client)(nil)
	_ provider.Capable = (*Client)(nil)
)

// New checks cfg and returns a client.
func New(cfg Config) (*Client, error) {
	c := &Client{
		name:      orDefault(cfg.Name, DefaultName),
		token:     cfg.APIToken,
		version:   orDefault(cfg.APIVersion, DefaultAPIVersion),
		timeout:   cfg.Timeout,
		retention: cfg.OutputRetention,
		http:      cfg.HTTPClient,
		download:  cfg.HTTPClient,
		outputs:   cfg.Outputs,
		now:       cfg.NowFunc,
		log:       cfg.Logger,
	}
	base, err := url.Parse(orDefault(cfg.BaseURL, DefaultBaseURL))
	if err != nil || (base.Scheme != "http" && base.Scheme != "https") || base.Host == "" {
		return nil, errors.New("runway base URL must be an absolute http(s) URL")
	}
	base.Path = strings.TrimRight(base.Path, "/")
	base.RawQuery, base.Fragment = "", ""
	c.base = base
	if c.timeout <= 0 {
		c.timeout = DefaultTimeout
	}
	if c.retention <= 0 {
		c.retention = DefaultOutputRetention
	}
	if c.http == nil {
		c.http = &http.Client{Transport: otelhttp.NewTransport(http.DefaultTransport.(*http.Transport).Clone(),
			otelhttp.WithSpanNameFormatter(func(_ string, r *http.Request) string { return "runway " + r.Method }))}
	}
	if c.download == nil {
		c.download = cfg.Outputs.Client(func(rt http.RoundTripper) http.RoundTripper {
			return otelhttp.NewTransport(rt, otelhttp.WithSpanNameFormatter(func(_ string, r *http.Request) string { return "runway download " + r.Method }))
		})
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

// apiCall is one request to the API.
type apiCall struct {
	op     string // names the call in errors: "create task"
	method string
	path   string // starts with /v1/, holds only checked segments
	body   []byte
	// create marks a call whose lost answer may have started a task.
	create bool
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
	header := http.Header{"Accept": {"application/json"}, "User-Agent": {"aivedio-pipeline/runway"}, VersionHeader: {c.version}}
	if c.token != "" {
		header.Set("Authorization", "Bearer "+c.token)
	}
	ans, err := provider.Exchange(ctx, c.http, provider.ExchangeParams{
		Op: call.op, Method: call.method, URL: c.base.String() + call.path, Body: call.body, Header: header,
		Creates: call.create, Timeout: c.timeout, MaxBody: maxBodyBytes,
	})
	switch {
	case errors.Is(err, provider.ErrAnswerTooLarge):
		return reply{}, c.malformed(call.op, ans.Status, errors.New("answer larger than 1 MiB"))
	case err != nil:
		return reply{}, err
	case !ans.OK():
		return reply{}, statusError(call, ans.Status, ans.Header, ans.Body, c.now())
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

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// checkID refuses ids that would change the request path.
func checkID(op, id string) error {
	if id == "" || strings.ContainsAny(id, "/?#%") || strings.TrimSpace(id) != id {
		return &provider.Error{Class: provider.ClassRejected, Message: fmt.Sprintf("%s: invalid task id", op)}
	}
	return nil
}
