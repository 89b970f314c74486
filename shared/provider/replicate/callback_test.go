package replicate_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/shared/provider"
	"github.com/aivedio/pipeline/shared/provider/replicate"
)

// The secrets of the callback tests, in Replicate's whsec_ form.
var (
	testKey     = []byte("0123456789abcdef0123456789abcdef")
	otherKey    = []byte("fedcba9876543210fedcba9876543210")
	testSecret  = "whsec_" + base64.StdEncoding.EncodeToString(testKey)
	callbackBod = `{"id":"p1","status":"succeeded","created_at":"2026-11-30T11:58:00Z","completed_at":"2026-11-30T11:59:00Z",` +
		`"output":"https://replicate.delivery/o.mp4","webhook":"https://api.example/cb?aivedio_client_request_id=req-1"}`
)

// sig signs like the Standard Webhooks spec: base64 HMAC-SHA256 of
// "id.timestamp.body".
func sig(key []byte, id, ts, body string) string {
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(id + "." + ts + "." + body))
	return "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil))
}

func TestParseCallback(t *testing.T) {
	t.Parallel()
	ts := strconv.FormatInt(testNow.Unix(), 10)
	headers := func(id, ts, signature string) http.Header {
		h := http.Header{}
		for k, v := range map[string]string{"webhook-id": id, "webhook-timestamp": ts, "webhook-signature": signature} {
			if v != "" {
				h.Set(k, v)
			}
		}
		return h
	}
	at := func(d time.Duration) string { return strconv.FormatInt(testNow.Add(d).Unix(), 10) }
	cases := []struct {
		name   string
		header http.Header
		body   string
		now    time.Time
		secret string
		class  provider.Class
	}{
		{name: "good", header: headers("msg_1", ts, sig(testKey, "msg_1", ts, callbackBod))},
		{name: "one of several signatures", header: headers("msg_1", ts, sig(otherKey, "msg_1", ts, callbackBod)+" v1a,AAAA "+sig(testKey, "msg_1", ts, callbackBod))},
		{name: "4m59s old", header: headers("msg_1", at(-299*time.Second), sig(testKey, "msg_1", at(-299*time.Second), callbackBod))},
		{name: "wrong key", header: headers("msg_1", ts, sig(otherKey, "msg_1", ts, callbackBod)), class: provider.ClassRejected},
		{name: "body changed", header: headers("msg_1", ts, sig(testKey, "msg_1", ts, callbackBod)), body: callbackBod + " ", class: provider.ClassRejected},
		{name: "id changed", header: headers("msg_2", ts, sig(testKey, "msg_1", ts, callbackBod)), class: provider.ClassRejected},
		{name: "asymmetric only", header: headers("msg_1", ts, "v1a,"+base64.StdEncoding.EncodeToString(make([]byte, 64))), class: provider.ClassRejected},
		{name: "signature not base64", header: headers("msg_1", ts, "v1,@@@"), class: provider.ClassRejected},
		{name: "6 minutes old", header: headers("msg_1", at(-6*time.Minute), sig(testKey, "msg_1", at(-6*time.Minute), callbackBod)), class: provider.ClassRejected},
		{name: "6 minutes ahead", header: headers("msg_1", at(6*time.Minute), sig(testKey, "msg_1", at(6*time.Minute), callbackBod)), class: provider.ClassRejected},
		{name: "timestamp not seconds", header: headers("msg_1", "yesterday", sig(testKey, "msg_1", "yesterday", callbackBod)), class: provider.ClassRejected},
		{name: "no id", header: headers("", ts, sig(testKey, "", ts, callbackBod)), class: provider.ClassRejected},
		{name: "no timestamp", header: headers("msg_1", "", sig(testKey, "msg_1", "", callbackBod)), class: provider.ClassRejected},
		{name: "no signature", header: headers("msg_1", ts, ""), class: provider.ClassRejected},
		{name: "no secret configured", header: headers("msg_1", ts, sig(testKey, "msg_1", ts, callbackBod)), secret: "-", class: provider.ClassRejected},
		{name: "signed but not a prediction", header: headers("msg_1", ts, sig(testKey, "msg_1", ts, `{"hello":1}`)), body: `{"hello":1}`, class: provider.ClassMalformed},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := newClient(t, func(c *replicate.Config) {
				c.WebhookSecret = testSecret
				if tc.secret == "-" {
					c.WebhookSecret = ""
				}
			})
			body := tc.body
			if body == "" {
				body = callbackBod
			}
			job, err := c.ParseCallback(tc.header, []byte(body), testNow)
			if tc.class != "" {
				requireClass(t, tc.class, err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, "p1", job.ID)
			require.Equal(t, provider.StatusSucceeded, job.Status)
			require.Equal(t, "req-1", job.ClientRequestID)
		})
	}
}

func TestNewRefusesBadSecrets(t *testing.T) {
	t.Parallel()
	for _, secret := range []string{"plain", "whsec_", "whsec_!!!", base64.StdEncoding.EncodeToString(testKey)} {
		_, err := replicate.New(replicate.Config{WebhookSecret: secret})
		require.Error(t, err, secret)
		if len(secret) > len("whsec_") {
			require.NotContains(t, err.Error(), secret, "a secret is never quoted")
		}
	}
	_, err := replicate.New(replicate.Config{BaseURL: "ftp://x"})
	require.Error(t, err)
}
