package config

import (
	"errors"
	"fmt"
	"net/url"
	"time"
)

// Review configures the optional content review of each task's output
// (docs/journey.md, "Content review"). It is off while REVIEW_URL is empty: the
// probe then asks for no review, and a task finishes on its derivatives
// alone. Whether a task needs review is recorded when it is probed, so
// changing these mid-flight affects only tasks probed afterwards.
type Review struct {
	URL     string        `envconfig:"REVIEW_URL" desc:"the moderation endpoint the review stage POSTs each task's sampled frames to; empty: content review is off (the default)"`
	Secret  string        `envconfig:"REVIEW_SECRET" desc:"shared secret of the HMAC-SHA256 signature (X-Aivedio-Signature: sha256=<hex> over the body) of each review request; required when REVIEW_URL is set"`
	Timeout time.Duration `envconfig:"REVIEW_TIMEOUT" default:"15s" desc:"bound of one call to the moderation endpoint; a call that takes longer counts as the reviewer being unavailable"`
	MaxWait time.Duration `envconfig:"REVIEW_MAX_WAIT" default:"30m" desc:"how long a task waits for an unavailable reviewer (from its first failed call) before it goes to NEEDS_ATTENTION with review.unavailable"`
	Base    time.Duration `envconfig:"REVIEW_RETRY_BASE" default:"5s" desc:"first wait before calling an unavailable reviewer again; doubles per call, jittered, up to REVIEW_RETRY_MAX (a Retry-After longer than it wins)"`
	Most    time.Duration `envconfig:"REVIEW_RETRY_MAX" default:"5m" desc:"longest wait between two calls to an unavailable reviewer"`
	Frames  int           `envconfig:"REVIEW_FRAMES" default:"3" desc:"how many frames, evenly spaced over the output, the reviewer is shown"`
	URLTTL  time.Duration `envconfig:"REVIEW_URL_TTL" default:"10m" desc:"lifetime of the presigned frame URLs a review request carries (minutes: the reviewer fetches them at once)"`
}

// On reports whether content review is on.
func (r Review) On() bool { return r.URL != "" }

// Validate reports the first unusable setting, naming its variable.
func (r Review) Validate() error {
	if !r.On() {
		return nil
	}
	if u, err := url.Parse(r.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return errors.New("REVIEW_URL must be an http:// or https:// URL")
	}
	switch {
	case r.Secret == "":
		return errors.New("REVIEW_SECRET must be set when REVIEW_URL is: the reviewer must be able to tell our requests from anyone's")
	case r.Timeout <= 0:
		return fmt.Errorf("REVIEW_TIMEOUT must be positive, got %s", r.Timeout)
	case r.MaxWait < time.Minute:
		return fmt.Errorf("REVIEW_MAX_WAIT must be at least 1m, got %s", r.MaxWait)
	case r.Base <= 0 || r.Most < r.Base:
		return fmt.Errorf("REVIEW_RETRY_BASE must be positive and at most REVIEW_RETRY_MAX, got %s and %s", r.Base, r.Most)
	case r.Frames < 1 || r.Frames > 10:
		return fmt.Errorf("REVIEW_FRAMES must be between 1 and 10, got %d", r.Frames)
	case r.URLTTL < time.Minute || r.URLTTL > time.Hour:
		return fmt.Errorf("REVIEW_URL_TTL must be between 1m and 1h (short-lived), got %s", r.URLTTL)
	}
	return nil
}
