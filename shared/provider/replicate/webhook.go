package replicate

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/aivedio/pipeline/shared/provider"
)

// CallbackTolerance is how far a callback's webhook-timestamp may be from
// now, either way, before it counts as a replay.
const CallbackTolerance = 5 * time.Minute

// maxSignatures bounds the work one webhook-signature header can cause;
// secret rotation needs two.
const maxSignatures = 8

// ParseCallback verifies a Standard Webhooks signature and timestamp and
// returns the prediction the callback reports. The body must be the raw
// request body, untouched: the signature covers its bytes.
//
// A missing header, a bad signature or a timestamp more than
// [CallbackTolerance] off is [provider.ClassRejected]; a well-signed body
// that is not a prediction is [provider.ClassMalformed]. The same callback
// may arrive more than once; webhook-id stays the same across retries.
func (c *Client) ParseCallback(header http.Header, body []byte, now time.Time) (provider.Job, error) {
	const op = "verify callback"
	if c.webhookKey == nil {
		return provider.Job{}, &provider.Error{Class: provider.ClassRejected, Message: op + ": no webhook secret configured"}
	}
	id, ts, sigs := header.Get("webhook-id"), header.Get("webhook-timestamp"), header.Get("webhook-signature")
	if id == "" || ts == "" || sigs == "" {
		return provider.Job{}, &provider.Error{Class: provider.ClassRejected, Message: op + ": missing webhook-id, webhook-timestamp or webhook-signature"}
	}
	if !c.signed(id, ts, sigs, body) {
		return provider.Job{}, &provider.Error{Class: provider.ClassRejected, Message: op + ": signature does not match"}
	}
	secs, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return provider.Job{}, &provider.Error{Class: provider.ClassRejected, Message: op + ": webhook-timestamp is not unix seconds"}
	}
	if skew := now.Sub(time.Unix(secs, 0)); skew > CallbackTolerance || skew < -CallbackTolerance {
		return provider.Job{}, &provider.Error{Class: provider.ClassRejected, Message: fmt.Sprintf("%s: timestamp is %s off", op, skew.Round(time.Second))}
	}
	return c.parseJob(op, 0, body)
}

// signed reports whether any v1 signature in sigs is the HMAC of
// "id.ts.body", compared in constant time.
func (c *Client) signed(id, ts, sigs string, body []byte) bool {
	mac := hmac.New(sha256.New, c.webhookKey)
	mac.Write([]byte(id))
	mac.Write([]byte{'.'})
	mac.Write([]byte(ts))
	mac.Write([]byte{'.'})
	mac.Write(body)
	want := mac.Sum(nil)

	ok := false
	for i, field := range strings.Fields(sigs) {
		if i == maxSignatures {
			break
		}
		version, sig, found := strings.Cut(field, ",")
		if !found || version != "v1" {
			continue // v1a (asymmetric) and future schemes are not ours
		}
		got, err := base64.StdEncoding.DecodeString(sig)
		if err != nil {
			continue
		}
		if hmac.Equal(got, want) {
			ok = true
		}
	}
	return ok
}

// decodeSecret reads a "whsec_<base64>" secret into the HMAC key.
func decodeSecret(secret string) ([]byte, error) {
	rest, ok := strings.CutPrefix(secret, "whsec_")
	if !ok {
		return nil, errors.New("replicate webhook secret must start with whsec_")
	}
	key, err := base64.StdEncoding.DecodeString(rest)
	if err != nil {
		key, err = base64.RawStdEncoding.DecodeString(rest)
	}
	if err != nil || len(key) == 0 {
		return nil, errors.New("replicate webhook secret is not whsec_ followed by base64")
	}
	return key, nil
}
