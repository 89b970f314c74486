package fetch_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/functions/fetch"
	"github.com/aivedio/pipeline/functions/stage"
	"github.com/aivedio/pipeline/shared/blob"
	"github.com/aivedio/pipeline/shared/catalog"
	"github.com/aivedio/pipeline/shared/config"
	"github.com/aivedio/pipeline/shared/dbtest"
	"github.com/aivedio/pipeline/shared/outbox"
	"github.com/aivedio/pipeline/shared/provider"
	"github.com/aivedio/pipeline/shared/task"
)

var journey = config.Journey{FetchRetryBase: 2 * time.Second, FetchRetryMax: time.Minute, FetchMaxWait: 10 * time.Minute}

type testBundle struct {
	pool      *pgxpool.Pool
	store     *blob.Store
	fake      *fakeProvider
	fn        *stage.Function
	task      task.Task
	attemptID uuid.UUID
	key       string
}

// setup makes a FETCHING task and a fetch function whose provider answers
// downloads with download.
func setup(t *testing.T, download func(n int) (provider.Output, error)) *testBundle {
	t.Helper()
	b := &testBundle{pool: dbtest.TestSchema(t), store: newStore(t), fake: &fakeProvider{download: download}}
	b.task, b.attemptID = fetchingTask(t, b.pool)
	b.key = outputKey(t, b.task)
	removeAfter(t, b.store, b.key)
	b.fn = fetch.New(fetch.Params{Pool: b.pool, Providers: provider.Single(b.fake), Blob: b.store, Timeout: 5 * time.Second, Journey: journey})
	return b
}

func (b *testBundle) deliver(t *testing.T, eventID string) error {
	t.Helper()
	_, err := b.fn.Handle(t.Context(), cloudEvent(t, b.task, eventID, catalog.EventFetchRequested,
		task.FetchRequested{TaskID: b.task.ID, AttemptID: b.attemptID}))
	return err
}

func (b *testBundle) reload(t *testing.T) task.Task {
	t.Helper()
	got, err := task.Get(t.Context(), b.pool, b.task.ID)
	require.NoError(t, err)
	return got
}

// video is a provider output of n pseudo-random bytes, with its length
// announced or not.
func video(n int64, announced bool) (func(int) (provider.Output, error), []byte) {
	var buf bytes.Buffer
	_, _ = io.CopyN(&buf, rand.NewChaCha8([32]byte{byte(n)}), n)
	body := buf.Bytes()
	length := int64(-1)
	if announced {
		length = n
	}
	return func(int) (provider.Output, error) {
		return provider.Output{Body: io.NopCloser(bytes.NewReader(body)), ContentType: "video/mp4", ContentLength: length}, nil
	}, body
}

func failing(class provider.Class) func(int) (provider.Output, error) {
	return func(int) (provider.Output, error) {
		return provider.Output{}, &provider.Error{Class: class, StatusCode: http.StatusNotFound}
	}
}

func TestOutputIsStoredAndProbed(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		size      int64
		announced bool
	}{
		{"small with length", 256 << 10, true},
		// Longer than one part and of unknown length: streamed as a
		// multipart upload, never held whole.
		{"multipart without length", blob.PartSize + 4096, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			download, body := video(tt.size, tt.announced)
			b := setup(t, download)
			id := uuid.NewString()
			require.NoError(t, b.deliver(t, id))

			sum := sha256.Sum256(body)
			obj, err := b.store.Stat(t.Context(), b.key)
			require.NoError(t, err)
			require.Equal(t, hex.EncodeToString(sum[:]), obj.SHA256)
			require.Equal(t, tt.size, obj.Size)
			rc, _, err := b.store.Open(t.Context(), b.key)
			require.NoError(t, err)
			stored, err := io.ReadAll(rc)
			require.NoError(t, rc.Close())
			require.NoError(t, err)
			require.True(t, bytes.Equal(body, stored), "the stored object is the provider's output")

			rows := assets(t, b.pool, b.task.ID)
			require.Len(t, rows, 1)
			require.Equal(t, "SOURCE", rows[0].Kind)
			require.Equal(t, b.key, rows[0].ObjectKey)
			require.Equal(t, sum[:], rows[0].SHA256)
			require.Equal(t, tt.size, rows[0].Size)
			require.Equal(t, "video/mp4", rows[0].ContentType)

			got := b.reload(t)
			require.Equal(t, task.MediaProcessing, got.Status)
			require.Equal(t, b.task.Version+1, got.Version)
			probes := storedEvents(t, b.pool, catalog.EventPostprocess)
			require.Len(t, probes, 1)
			require.Equal(t, catalog.TagProbe, probes[0].Tag)
			var req task.Postprocess
			require.NoError(t, json.Unmarshal(probes[0].Envelope.Payload, &req))
			require.Equal(t, task.Postprocess{TaskID: b.task.ID, AssetID: rows[0].ID, Step: catalog.TagProbe}, req)
			require.Equal(t, id, probes[0].Envelope.CausationID)

			gets, downloads := b.fake.counts()
			require.Equal(t, 1, gets)
			require.Equal(t, 1, downloads)

			// The same event again is a duplicate: nothing is downloaded or written twice.
			require.NoError(t, b.deliver(t, id))
			_, downloads = b.fake.counts()
			require.Equal(t, 1, downloads)
			require.Len(t, storedEvents(t, b.pool, catalog.EventPostprocess), 1)
		})
	}
}

func TestEarlierUploadIsAdopted(t *testing.T) {
	t.Parallel()
	b := setup(t, func(int) (provider.Output, error) {
		t.Error("the output was downloaded again")
		return provider.Output{}, &provider.Error{Class: provider.ClassUnavailable}
	})
	// A delivery that stored the output and died before its database write.
	_, body := video(64<<10, true)
	obj, err := b.store.Put(t.Context(), b.key, bytes.NewReader(body), &blob.PutOpts{ContentType: "video/mp4", Size: int64(len(body))})
	require.NoError(t, err)

	require.NoError(t, b.deliver(t, uuid.NewString()))
	gets, downloads := b.fake.counts()
	require.Zero(t, gets, "the provider is not asked again")
	require.Zero(t, downloads)
	rows := assets(t, b.pool, b.task.ID)
	require.Len(t, rows, 1)
	require.Equal(t, obj.SHA256, hex.EncodeToString(rows[0].SHA256))
	require.Equal(t, int64(len(body)), rows[0].Size)
	require.Equal(t, task.MediaProcessing, b.reload(t).Status)
	require.Len(t, storedEvents(t, b.pool, catalog.EventPostprocess), 1)
}

// TestOutputNotReadyIsAWait: an output the provider has not made ready is
// a business wait (seed 7.10.3), not a broker retry: the delivery is
// answered, the wait is on the task's timeline, and a delayed fetch is
// scheduled, sooner first and later after; it carries the task's state
// and version, so an older one goes stale.
func TestOutputNotReadyIsAWait(t *testing.T) {
	t.Parallel()
	ready, _ := video(32<<10, true)
	b := setup(t, func(n int) (provider.Output, error) {
		if n <= 2 {
			return failing(provider.ClassOutputNotReady)(n)
		}
		return ready(n)
	})
	id := uuid.NewString()
	before := time.Now()
	require.NoError(t, b.deliver(t, id), "answered: the adapter ACKs, no delivery attempt is spent")
	require.Equal(t, "APPLIED", inboxResult(t, b.pool, catalog.GroupFetch.Name, id))

	got := b.reload(t)
	require.Equal(t, task.Fetching, got.Status)
	require.Equal(t, b.task.Version+1, got.Version, "the wait is on the timeline")
	require.Empty(t, assets(t, b.pool, b.task.ID))
	first := b.delayedFetch(t, 1)
	require.Equal(t, catalog.AssetFetchDelay.Name, first.Topic.Name)
	req := b.payload(t, first)
	require.Equal(t, task.Wait{ExpectedStatus: task.Fetching, ExpectedVersion: got.Version, NotBefore: req.NotBefore,
		Reason: "provider.output_not_ready", RetryAttempt: 1, WaitingSince: req.WaitingSince}, req.Wait)
	require.True(t, first.DeliverAt.Equal(req.NotBefore))
	requireWithin(t, first.DeliverAt, before, journey.FetchRetryBase/2, journey.FetchRetryBase)

	// The delayed fetch: still not ready, a longer wait.
	before = time.Now()
	require.NoError(t, b.deliverPayload(t, uuid.NewString(), req))
	second := b.payload(t, b.delayedFetch(t, 2))
	require.Equal(t, 2, second.RetryAttempt)
	require.True(t, second.WaitingSince.Equal(req.WaitingSince), "the maximum counts from the first try")
	requireWithin(t, second.NotBefore, before, journey.FetchRetryBase, 2*journey.FetchRetryBase)

	// The first delayed fetch again (a duplicate of another message id, or
	// a reconciler's copy): its version no longer holds.
	stale := uuid.NewString()
	require.NoError(t, b.deliverPayload(t, stale, req))
	require.Equal(t, "STALE_NOOP", inboxResult(t, b.pool, catalog.GroupFetch.Name, stale))

	// Ready now.
	require.NoError(t, b.deliverPayload(t, uuid.NewString(), second))
	require.Equal(t, task.MediaProcessing, b.reload(t).Status)
	require.Len(t, assets(t, b.pool, b.task.ID), 1)
}

// TestAWaitIsBounded: an output still not ready FETCH_MAX_WAIT after the
// first try fails the task, clearly, and releases its credits.
func TestAWaitIsBounded(t *testing.T) {
	t.Parallel()
	for _, class := range []provider.Class{provider.ClassOutputNotReady, provider.ClassRateLimited, provider.ClassUnavailable} {
		t.Run(string(class), func(t *testing.T) {
			t.Parallel()
			b := setup(t, failing(class))
			require.NoError(t, b.deliver(t, uuid.NewString()))
			req := b.payload(t, b.delayedFetch(t, 1))
			req.WaitingSince = time.Now().Add(-journey.FetchMaxWait - time.Second)
			require.NoError(t, b.deliverPayload(t, uuid.NewString(), req))

			got := b.reload(t)
			require.Equal(t, task.Failed, got.Status)
			require.Equal(t, "provider.output_not_ready", got.ErrorCode)
			require.Contains(t, got.ErrorMessage, "FETCH_MAX_WAIT")
			require.Contains(t, got.ErrorMessage, string(class))
			require.Len(t, storedEvents(t, b.pool, catalog.EventSettleRequested), 1)
		})
	}
}

// delayedFetch is the n-th fetch the stage scheduled, waiting for it.
func (b *testBundle) delayedFetch(t *testing.T, n int) outbox.Stored {
	t.Helper()
	fetches := storedEvents(t, b.pool, catalog.EventFetchRequested)
	require.Len(t, fetches, n)
	return fetches[n-1]
}

func (b *testBundle) payload(t *testing.T, e outbox.Stored) task.FetchRequested {
	t.Helper()
	var req task.FetchRequested
	require.NoError(t, json.Unmarshal(e.Envelope.Payload, &req))
	require.Equal(t, b.task.ID, req.TaskID)
	require.Equal(t, b.attemptID, req.AttemptID)
	return req
}

func (b *testBundle) deliverPayload(t *testing.T, eventID string, req task.FetchRequested) error {
	t.Helper()
	_, err := b.fn.Handle(t.Context(), cloudEvent(t, b.task, eventID, catalog.EventFetchRequested, req))
	return err
}

// requireWithin checks that at lies between lo and hi after from (and a
// second of slack for the test itself).
func requireWithin(t *testing.T, at, from time.Time, lo, hi time.Duration) {
	t.Helper()
	require.False(t, at.Before(from.Add(lo)), "%s is sooner than %s after %s", at, lo, from)
	require.False(t, at.After(from.Add(hi+time.Second)), "%s is later than %s after %s", at, hi, from)
}

func TestOutputExpiredTwiceFails(t *testing.T) {
	t.Parallel()
	b := setup(t, failing(provider.ClassOutputExpired))
	id := uuid.NewString()
	require.NoError(t, b.deliver(t, id))

	got := b.reload(t)
	require.Equal(t, task.Failed, got.Status)
	require.Equal(t, "provider.output_expired", got.ErrorCode)
	gets, downloads := b.fake.counts()
	require.Equal(t, 2, gets, "a fresh output URL is asked for once")
	require.Equal(t, 2, downloads)
	settles := storedEvents(t, b.pool, catalog.EventSettleRequested)
	require.Len(t, settles, 1)
	var req task.SettleRequested
	require.NoError(t, json.Unmarshal(settles[0].Envelope.Payload, &req))
	require.Equal(t, task.SettleRequested{TaskID: b.task.ID, Status: task.Failed}, req)
	require.Empty(t, assets(t, b.pool, b.task.ID))
	require.Equal(t, "APPLIED", inboxResult(t, b.pool, catalog.GroupFetch.Name, id))
}

func TestOutputExpiredOnceIsFetchedAgain(t *testing.T) {
	t.Parallel()
	fresh, body := video(16<<10, true)
	b := setup(t, func(n int) (provider.Output, error) {
		if n == 1 {
			return failing(provider.ClassOutputExpired)(n)
		}
		return fresh(n)
	})
	require.NoError(t, b.deliver(t, uuid.NewString()))
	require.Equal(t, task.MediaProcessing, b.reload(t).Status)
	sum := sha256.Sum256(body)
	rows := assets(t, b.pool, b.task.ID)
	require.Len(t, rows, 1)
	require.Equal(t, sum[:], rows[0].SHA256)
}

func TestFetchOfTaskNotFetchingDoesNothing(t *testing.T) {
	t.Parallel()
	b := setup(t, failing(provider.ClassUnavailable))
	_, err := b.pool.Exec(t.Context(), `UPDATE generation_tasks SET status = 'FAILED' WHERE task_id = $1`, b.task.ID)
	require.NoError(t, err)
	id := uuid.NewString()
	require.NoError(t, b.deliver(t, id))
	gets, downloads := b.fake.counts()
	require.Zero(t, gets)
	require.Zero(t, downloads)
	require.Equal(t, "STALE_NOOP", inboxResult(t, b.pool, catalog.GroupFetch.Name, id))
}

// TestAnOutputTheGuardRefusesFailsTheTask: an output URL that is not
// https, or an output past FETCH_MAX_BYTES (announced, or only found
// while it streams), FAILS the task with the refusal's code, stores
// nothing, and is not fetched again.
func TestAnOutputTheGuardRefusesFailsTheTask(t *testing.T) {
	t.Parallel()
	const limit = 1 << 20
	big := bytes.Repeat([]byte{0x42}, limit+1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/streamed" {
			// No Content-Length: the size shows only as it streams.
			w.Header().Set("Content-Type", "video/mp4")
			w.WriteHeader(http.StatusOK)
			for chunk := range slices.Chunk(big, 64<<10) {
				_, _ = w.Write(chunk)
				w.(http.Flusher).Flush()
			}
			return
		}
		http.ServeContent(w, r, "out.mp4", time.Time{}, bytes.NewReader(big))
	}))
	t.Cleanup(srv.Close)

	for _, c := range []struct {
		name, path, code string
		guard            provider.OutputGuard
	}{
		{"plain http", "/announced", provider.CodeInsecureOutputURL, provider.OutputGuard{MaxBytes: limit}},
		{"announced too large", "/announced", provider.CodeOutputTooLarge, provider.OutputGuard{AllowPrivate: true, MaxBytes: limit}},
		{"streamed too large", "/streamed", provider.CodeOutputTooLarge, provider.OutputGuard{AllowPrivate: true, MaxBytes: limit}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			client := c.guard.Client(nil)
			t.Cleanup(client.CloseIdleConnections)
			b := setup(t, func(int) (provider.Output, error) {
				u, err := url.Parse(srv.URL + c.path)
				require.NoError(t, err)
				out, status, _, err := provider.FetchOutput(t.Context(), provider.FetchParams{Op: "download output", HTTP: client, URL: u,
					HeaderTimeout: 5 * time.Second, Guard: c.guard})
				if err == nil && status != http.StatusOK {
					err = fmt.Errorf("status %d", status)
				}
				return out, err
			})
			require.NoError(t, b.deliver(t, uuid.NewString()))
			got := b.reload(t)
			require.Equal(t, task.Failed, got.Status)
			require.Equal(t, c.code, got.ErrorCode, got.ErrorMessage)
			require.Contains(t, got.ErrorMessage, "the generation was not repeated")
			_, downloads := b.fake.counts()
			require.Equal(t, 1, downloads, "a refusal is not tried again")
			require.Empty(t, assets(t, b.pool, b.task.ID))
			_, err := b.store.Stat(t.Context(), outputKey(t, b.task))
			require.ErrorIs(t, err, blob.ErrNotFound, "nothing stored")
		})
	}
}
