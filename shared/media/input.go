package media

import (
	"fmt"
	"net/url"
	"path/filepath"
	"strings"
)

// Protocols ffmpeg may open for each kind of input. A playlist or reference
// inside a remote file cannot make ffmpeg read local files, and a local file
// cannot make it reach the network.
const (
	localProtocols  = "file"
	remoteProtocols = "http,https,tcp,tls,crypto"
)

// source is an input made safe to hand to ffmpeg: never read as an option,
// never as a protocol other than the one it names, and never shown with its
// query string (a presigned URL's signature).
type source struct {
	arg       string // what ffmpeg opens, after -i
	protocols string // -protocol_whitelist
	formats   string // -format_whitelist
	display   string // what error messages show
	secrets   []string
}

// newSource accepts an http(s) URL or a local path.
func newSource(input string) (source, error) {
	if input == "" {
		return source{}, fmt.Errorf("empty input: %w", ErrUnsupportedInput)
	}
	if scheme, _, ok := strings.Cut(input, "://"); ok && !strings.ContainsAny(scheme, `/\`) {
		return newRemoteSource(input)
	}
	abs, err := filepath.Abs(input)
	if err != nil {
		return source{}, fmt.Errorf("resolve input path %q: %w", input, err)
	}
	// "file:" stops ffmpeg from reading "a:b.mp4" as protocol "a".
	return source{arg: "file:" + abs, protocols: localProtocols, formats: InputFormats, display: input}, nil
}

func newRemoteSource(input string) (source, error) {
	u, err := url.Parse(input)
	if err != nil {
		// url.Error repeats the URL, query and all: keep only the reason.
		var reason error = err
		if ue, ok := err.(*url.Error); ok {
			reason = ue.Err
		}
		return source{}, fmt.Errorf("parse input URL: %v: %w", reason, ErrUnsupportedInput)
	}
	display := u.Scheme + "://" + u.Host + u.EscapedPath()
	if u.Scheme != "http" && u.Scheme != "https" {
		return source{}, fmt.Errorf("input %s: scheme %q is not http or https: %w", display, u.Scheme, ErrUnsupportedInput)
	}
	if u.Host == "" {
		return source{}, fmt.Errorf("input %s: no host: %w", display, ErrUnsupportedInput)
	}
	s := source{arg: input, protocols: remoteProtocols, formats: InputFormats, display: display, secrets: []string{input}}
	if u.RawQuery != "" {
		s.secrets = append(s.secrets, u.RawQuery)
	}
	if u.User != nil {
		s.secrets = append(s.secrets, u.User.String())
	}
	return s, nil
}

// redact replaces the input's secret parts in text written by ffmpeg.
func (s source) redact(text string) string {
	for _, secret := range s.secrets {
		if secret == s.arg {
			text = strings.ReplaceAll(text, secret, s.display)
			continue
		}
		text = strings.ReplaceAll(text, secret, "REDACTED")
	}
	return text
}

// inputArgs are the options that open s as an input: the protocols and
// the demuxers ffmpeg may use for it, which are input options and so
// must precede every -i, then -i.
func (s source) inputArgs(opts ...string) []string {
	args := append([]string{"-protocol_whitelist", s.protocols, "-format_whitelist", s.formats}, opts...)
	return append(args, "-i", s.arg)
}
