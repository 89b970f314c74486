package replicate_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/aivedio/pipeline/local/providersim"
	"github.com/aivedio/pipeline/shared/provider"
	"github.com/aivedio/pipeline/shared/provider/replicate"
)

// Example runs one generation against the provider simulator; against
// Replicate only the base URL, token and secret differ.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	opts := providersim.DefaultOptions()
	opts.JobDurationMin, opts.JobDurationMax = 50*time.Millisecond, 50*time.Millisecond
	sim, err := providersim.New(opts, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	baseURL, err := sim.Start(ctx, "127.0.0.1:0")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer sim.Close()

	client, err := replicate.New(replicate.Config{
		BaseURL:       baseURL, // default https://api.replicate.com
		APIToken:      "r8_example",
		WebhookSecret: sim.WebhookSecret(),
		// The simulator serves outputs over http on loopback, which a
		// deployment's downloads refuse.
		Outputs: provider.OutputGuard{AllowPrivate: true},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer client.CloseIdleConnections()

	job, err := client.Submit(ctx, provider.SubmitRequest{
		IdempotencyKey:  "attempt-1",
		ClientRequestID: "task-1/attempt-1",
		Model:           "acme/video-model",
		Prompt:          "a paper boat on a rainy street",
		DurationSeconds: 2,
		Resolution:      "1280x720",
	})
	if err != nil {
		// Branch on the class: wait RetryAfter on rate_limited, reconcile
		// with FindByClientRequestID on timeout_unknown, and so on.
		fmt.Println(provider.ClassOf(err), provider.RetryAfterOf(err))
		return
	}
	fmt.Println("submitted:", job.Status)

	for !job.Status.Terminal() {
		time.Sleep(20 * time.Millisecond)
		if job, err = client.Get(ctx, job.ID); err != nil {
			fmt.Println(provider.ClassOf(err))
			return
		}
	}
	fmt.Println("finished:", job.Status)

	out, err := client.Download(ctx, job)
	if err != nil {
		fmt.Println(provider.ClassOf(err))
		return
	}
	defer out.Body.Close()
	n, _ := io.Copy(io.Discard, out.Body) // stream it to storage instead
	fmt.Println(out.ContentType, n == out.ContentLength)
	// Output:
	// submitted: queued
	// finished: succeeded
	// video/mp4 true
}

// ExampleClient_ParseCallback verifies a completion callback the way the
// callback endpoint does: with the raw body and the request's headers.
func ExampleClient_ParseCallback() {
	key := []byte("an example key of 24+ bytes!")
	client, err := replicate.New(replicate.Config{WebhookSecret: "whsec_" + base64.StdEncoding.EncodeToString(key)})
	if err != nil {
		fmt.Println(err)
		return
	}

	// What Replicate sends.
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	body := []byte(`{"id":"ufawqhfynnddngldkgtslldrkq","status":"succeeded","created_at":"2026-11-30T11:58:00Z",` +
		`"completed_at":"2026-11-30T11:59:30Z","output":"https://replicate.delivery/abc/output.mp4",` +
		`"webhook":"https://api.example/v1/provider-callbacks/replicate?aivedio_client_request_id=task-1%2Fattempt-1"}`)
	ts := strconv.FormatInt(now.Unix(), 10)
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte("msg_1." + ts + "." + string(body)))
	header := http.Header{}
	header.Set("webhook-id", "msg_1")
	header.Set("webhook-timestamp", ts)
	header.Set("webhook-signature", "v1,"+base64.StdEncoding.EncodeToString(mac.Sum(nil)))

	job, err := client.ParseCallback(header, body, now)
	fmt.Println(job.ID, job.Status, job.ClientRequestID, job.OutputExpiresAt.Format(time.RFC3339), err)

	_, err = client.ParseCallback(header, body, now.Add(10*time.Minute))
	fmt.Println(provider.ClassOf(err))
	// Output:
	// ufawqhfynnddngldkgtslldrkq succeeded task-1/attempt-1 2026-11-30T12:59:30Z <nil>
	// rejected
}
