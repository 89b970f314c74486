package provider

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"syscall"
	"time"
)

// DefaultMaxOutputBytes is the largest output a download stores when the
// guard names no cap: far above a generated clip, far below what fills a
// worker's disk or the bucket.
const DefaultMaxOutputBytes int64 = 2 << 30

// Codes of an output download the guard refused. Each is permanent: the
// same URL is refused again, so the task fails with it instead of retrying.
const (
	CodeInsecureOutputURL     = "fetch.insecure_url"
	CodePrivateOutputAddress  = "fetch.private_address"
	CodeOutputTooLarge        = "fetch.too_large"
	CodeOutputTooManyRedirect = "fetch.too_many_redirects"
)

// OutputGuard bounds where an output download may go and what it may
// bring back: an output URL comes from the provider's answer, so a
// provider that was tricked (or a forged job) must not make a worker
// reach our own network or fill its disk. The zero value is strict.
type OutputGuard struct {
	// AllowPrivate lets a download use plain http and connect to
	// loopback, private, link-local and other non-public addresses: for
	// the local provider simulators only, never in a deployment.
	AllowPrivate bool
	// MaxBytes caps an output's size; 0 means [DefaultMaxOutputBytes].
	MaxBytes int64
}

// RefusedError is an output download the guard refused, with its code.
type RefusedError struct {
	Code    string
	Message string
}

func (e *RefusedError) Error() string { return e.Message }

func (g OutputGuard) maxBytes() int64 {
	if g.MaxBytes > 0 {
		return g.MaxBytes
	}
	return DefaultMaxOutputBytes
}

// checkScheme refuses a URL that is not https, unless private use is allowed.
func (g OutputGuard) checkScheme(op, scheme string) error {
	if g.AllowPrivate || scheme == "https" {
		return nil
	}
	return &RefusedError{Code: CodeInsecureOutputURL, Message: fmt.Sprintf("%s: the output URL uses %s, not https", op, scheme)}
}

// Client is an http.Client for downloads under g: every connection, to
// the first host and to every redirect's, is checked when it is made,
// on the address it is made to, so a name that resolves to a private
// address (or is re-pointed there after a first check) is refused; each
// redirect must be https too. No proxy from the environment is used: it
// would hide the address the check must see. wrap, when not nil, wraps
// the transport (tracing).
func (g OutputGuard) Client(wrap func(http.RoundTripper) http.RoundTripper) *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.Proxy = nil
	dialer := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second, Control: g.control}
	tr.DialContext = dialer.DialContext
	var rt http.RoundTripper = tr
	if wrap != nil {
		rt = wrap(tr)
	}
	return &http.Client{Transport: rt, CheckRedirect: func(req *http.Request, via []*http.Request) error {
		if len(via) >= 10 {
			return &RefusedError{Code: CodeOutputTooManyRedirect, Message: "download output: more than 10 redirects"}
		}
		return g.checkScheme("download output: a redirect", req.URL.Scheme)
	}}
}

// control refuses a connection to an address that is not public.
func (g OutputGuard) control(_, address string, _ syscall.RawConn) error {
	if g.AllowPrivate {
		return nil
	}
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return &RefusedError{Code: CodePrivateOutputAddress, Message: fmt.Sprintf("download output: cannot read the address %q", address)}
	}
	if ip := ap.Addr().Unmap(); !public(ip) {
		return &RefusedError{Code: CodePrivateOutputAddress, Message: fmt.Sprintf("download output: the output's host resolves to %s, which is not a public address", ip)}
	}
	return nil
}

// sharedAddressSpace is carrier-grade NAT (RFC 6598): not public, yet not
// IsPrivate.
var sharedAddressSpace = netip.MustParsePrefix("100.64.0.0/10")

func public(ip netip.Addr) bool {
	return ip.IsGlobalUnicast() && !ip.IsPrivate() && !sharedAddressSpace.Contains(ip) &&
		!(ip.Is4() && ip.As4()[0] == 0)
}

// refused is the guard's refusal inside a transport error, if it is one.
func refused(err error) (*RefusedError, bool) {
	var r *RefusedError
	return r, errors.As(err, &r)
}

// RefusalOf is the guard's refusal of out's body once it grew past its
// cap while it was read, or nil: a reader of the body (an upload) may
// report the read's failure in words of its own.
func RefusalOf(out Output) *RefusedError {
	sb, ok := out.Body.(*streamBody)
	if !ok {
		return nil
	}
	if cb, ok := sb.ReadCloser.(*cappedBody); ok && cb.left < 0 {
		return cb.tooLarge()
	}
	return nil
}

// cappedBody ends a download that grows past its cap with the guard's
// refusal, so the upload it feeds fails instead of storing a part.
type cappedBody struct {
	io.ReadCloser
	left int64
	op   string
	max  int64
}

func (b *cappedBody) Read(p []byte) (int, error) {
	if b.left < 0 {
		return 0, b.tooLarge()
	}
	if int64(len(p)) > b.left+1 {
		p = p[:b.left+1]
	}
	n, err := b.ReadCloser.Read(p)
	b.left -= int64(n)
	if b.left < 0 {
		return n, b.tooLarge()
	}
	return n, err
}

func (b *cappedBody) tooLarge() *RefusedError {
	return &RefusedError{Code: CodeOutputTooLarge, Message: fmt.Sprintf("%s: the output is larger than the %d-byte cap (FETCH_MAX_BYTES)", b.op, b.max)}
}
