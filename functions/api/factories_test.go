package api_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/functions"
	"github.com/aivedio/pipeline/functions/api"
	"github.com/aivedio/pipeline/functions/stage/stagetest"
	"github.com/aivedio/pipeline/shared/billing"
	"github.com/aivedio/pipeline/shared/blob"
	"github.com/aivedio/pipeline/shared/config"
	"github.com/aivedio/pipeline/shared/dbtest"
	"github.com/aivedio/pipeline/shared/live"
	"github.com/aivedio/pipeline/shared/provider"
	"github.com/aivedio/pipeline/shared/replay"
	"github.com/aivedio/pipeline/shared/task"
	"github.com/aivedio/pipeline/shared/tenant"
)

const (
	testModel      = "acme/video-1"
	pricePerSecond = 10
	maxBodyBytes   = 4096
	maxPromptChars = 100
)

type testBundle struct {
	pool *pgxpool.Pool
	rdb  *redis.Client
	srv  *api.Server
	http *httptest.Server
}

// setup starts a server on a fresh schema and the test Redis. Its event
// subscription runs only after runEvents.
func setup(t *testing.T) *testBundle {
	t.Helper()
	// Pub/sub ignores the database number: every test uses its own tenants,
	// never a fixed channel.
	return setupWith(t, dbtest.TestSchema(t), stagetest.NewRedis(t))
}

// setupWith starts a server on pool and rdb; opts change its options.
func setupWith(t *testing.T, pool *pgxpool.Pool, rdb *redis.Client, opts ...func(*api.Options)) *testBundle {
	t.Helper()
	o := api.Options{
		Pool:       pool,
		Redis:      rdb,
		Blob:       fakePresigner{},
		Callbacks:  []api.CallbackParser{fakeParser{}},
		Limits:     config.API{MaxBodyBytes: maxBodyBytes, MaxPromptChars: maxPromptChars, DownloadTTL: 15 * time.Minute},
		Models:     []string{testModel, "acme/video-2"},
		Price:      billing.Price{DefaultPerSecond: pricePerSecond},
		Replay:     replay.NewDesk(pool, functions.ReplayRules(), nil),
		Logger:     slog.New(slog.NewTextHandler(t.Output(), nil)),
		Heartbeat:  200 * time.Millisecond,
		Registerer: prometheus.NewRegistry(),
	}
	for _, opt := range opts {
		opt(&o)
	}
	srv := api.New(o)
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close)
	return &testBundle{pool: pool, rdb: rdb, srv: srv, http: hs}
}

// publish pushes a change to its tenant's subscribers, as the notify stage
// does.
func (b *testBundle) publish(t *testing.T, c live.Change) {
	t.Helper()
	_, err := live.Publish(t.Context(), b.rdb, c)
	require.NoError(t, err)
}

// runEvents runs the server's event subscription until the test ends.
func (b *testBundle) runEvents(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.WithoutCancel(t.Context()))
	var wg sync.WaitGroup
	wg.Go(func() { require.NoError(t, b.srv.Run(ctx)) })
	t.Cleanup(func() {
		cancel()
		wg.Wait()
	})
}

// tenant creates a tenant with credits and a key of role.
func (b *testBundle) tenant(t *testing.T, credits int64, role string) (uuid.UUID, string) {
	t.Helper()
	var c tenant.Created
	require.NoError(t, pgx.BeginFunc(t.Context(), b.pool, func(tx pgx.Tx) error {
		var err error
		c, err = tenant.Create(t.Context(), tx, tenant.NewTenant{Name: "acme", Credits: credits}, role)
		return err
	}))
	return c.TenantID, c.Key
}

// response is an answer read whole.
type response struct {
	status int
	header http.Header
	body   []byte
}

func (r response) json(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	require.NoError(t, json.Unmarshal(r.body, &m), "body: %s", r.body)
	return m
}

// errorCode returns the error code of an error response and checks its shape.
func (r response) errorCode(t *testing.T) string {
	t.Helper()
	var e struct {
		Error struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	require.NoError(t, json.Unmarshal(r.body, &e), "body: %s", r.body)
	require.NotEmpty(t, e.Error.Code, "body: %s", r.body)
	require.NotEmpty(t, e.Error.Message, "body: %s", r.body)
	require.Equal(t, "application/json", r.header.Get("Content-Type"))
	return e.Error.Code
}

func (r response) message(t *testing.T) string {
	t.Helper()
	return r.json(t)["error"].(map[string]any)["message"].(string)
}

// do sends a request; headers are name, value pairs.
func (b *testBundle) do(t *testing.T, method, path, key, body string, headers ...string) response {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(t.Context(), method, b.http.URL+path, rd)
	require.NoError(t, err)
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Add(headers[i], headers[i+1])
	}
	resp, err := b.http.Client().Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return response{status: resp.StatusCode, header: resp.Header, body: out}
}

// create posts a generation under an idempotency key.
func (b *testBundle) create(t *testing.T, key, idem, body string) response {
	t.Helper()
	return b.do(t, http.MethodPost, "/v1/generations", key, body, "Idempotency-Key", idem, "Content-Type", "application/json")
}

// createTask creates a generation and returns its id.
func (b *testBundle) createTask(t *testing.T, key string) uuid.UUID {
	t.Helper()
	r := b.create(t, key, uuid.NewString(), validBody)
	require.Equal(t, http.StatusAccepted, r.status, "body: %s", r.body)
	return uuid.MustParse(r.json(t)["task_id"].(string))
}

const validBody = `{"model":"acme/video-1","prompt":"a cat surfing at dawn","duration_seconds":4,"resolution":"1280x720"}`

// move applies transitions to a task as the stages would.
func (b *testBundle) move(t *testing.T, id uuid.UUID, to ...task.Status) task.Task {
	t.Helper()
	var cur task.Task
	for _, s := range to {
		require.NoError(t, pgx.BeginFunc(t.Context(), b.pool, func(tx pgx.Tx) error {
			var err error
			if cur, err = task.Get(t.Context(), tx, id); err != nil {
				return err
			}
			cur, err = task.Apply(t.Context(), tx, task.Origin{Producer: "test"}, cur, task.Transition{To: s})
			return err
		}))
	}
	return cur
}

func (b *testBundle) count(t *testing.T, sql string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, b.pool.QueryRow(t.Context(), sql, args...).Scan(&n))
	return n
}

// outboxPayloads returns the payloads of a task's events of one type, in
// the order written.
func (b *testBundle) outboxPayloads(t *testing.T, id uuid.UUID, eventType string) []map[string]any {
	t.Helper()
	rows, err := b.pool.Query(t.Context(), `SELECT payload FROM outbox_events WHERE aggregate_id = $1 AND event_type = $2
		ORDER BY created_at, occurred_at`, id.String(), eventType)
	require.NoError(t, err)
	out, err := pgx.CollectRows(rows, pgx.RowTo[map[string]any])
	require.NoError(t, err)
	return out
}

// fakePresigner signs nothing; its URLs name the key and lifetime.
type fakePresigner struct{}

func (fakePresigner) PresignDownload(_ context.Context, key string, ttl time.Duration, _ blob.Download) (string, error) {
	return "https://blob.test/" + key + "?expires=" + ttl.String(), nil
}

// fakeParser verifies callbacks signed "X-Signature: good"; the body is
// {"id": job id}.
type fakeParser struct{}

const fakeProvider = "fakeprov"

func (fakeParser) Name() string { return fakeProvider }

func (fakeParser) ParseCallback(h http.Header, body []byte, _ time.Time) (provider.Job, error) {
	if h.Get("X-Signature") != "good" {
		return provider.Job{}, &provider.Error{Class: provider.ClassRejected, Message: "bad signature"}
	}
	var j struct {
		ID              string `json:"id"`
		ClientRequestID string `json:"client_request_id"`
	}
	if err := json.Unmarshal(body, &j); err != nil {
		return provider.Job{}, &provider.Error{Class: provider.ClassMalformed, Err: errors.New("not json")}
	}
	return provider.Job{ID: j.ID, ClientRequestID: j.ClientRequestID, Status: provider.StatusSucceeded}, nil
}
