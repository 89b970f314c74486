// Package stagetest holds what the stage packages' tests share: building
// the CloudEvent an adapter would deliver, reading what a stage wrote (its
// outbox events, inbox results, the task's timeline), and the real Redis,
// S3 and ffmpeg the media and poll stages run against. Like dbtest, it
// fails a test under `make test` when a service is missing and skips it
// otherwise.
package stagetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/shared/blob"
	"github.com/aivedio/pipeline/shared/config"
	"github.com/aivedio/pipeline/shared/envelope"
	"github.com/aivedio/pipeline/shared/media"
	"github.com/aivedio/pipeline/shared/media/mediatest"
	"github.com/aivedio/pipeline/shared/outbox"
	"github.com/aivedio/pipeline/shared/provider"
	"github.com/aivedio/pipeline/shared/servicetest"
	"github.com/aivedio/pipeline/shared/task"
)

// Bucket is the S3 bucket the stage tests store objects in; each test
// deletes its objects, the bucket stays.
const Bucket = "aivedio-functions-test"

// CloudEvent builds the CloudEvent the adapter would deliver for one event
// about tk.
func CloudEvent(t *testing.T, tk task.Task, eventID, eventType string, payload any) event.Event {
	t.Helper()
	env, err := envelope.New(envelope.NewParams{EventID: eventID, EventType: eventType, Producer: "test",
		AggregateType: task.AggregateType, AggregateID: tk.ID.String(), TenantID: tk.TenantID.String(), Payload: payload})
	require.NoError(t, err)
	ce, err := env.ToCloudEvent()
	require.NoError(t, err)
	return ce
}

// StatusOf is the HTTP status a Handle error answers with; 200 for nil.
func StatusOf(t *testing.T, err error) int {
	t.Helper()
	if err == nil {
		return 200
	}
	var res *cehttp.Result
	require.True(t, errors.As(err, &res), "Handle returned %v, not an HTTP result", err)
	return res.StatusCode
}

// StoredEvents are the outbox events of one type, oldest first.
func StoredEvents(t *testing.T, pool *pgxpool.Pool, eventType string) []outbox.Stored {
	t.Helper()
	rows, err := pool.Query(t.Context(), `SELECT `+outbox.Columns+` FROM outbox_events WHERE event_type = $1 ORDER BY created_at, event_id`, eventType)
	require.NoError(t, err)
	evs, err := outbox.Scan(rows)
	require.NoError(t, err)
	return evs
}

// InboxResult is what the inbox recorded for an event, "" when nothing.
func InboxResult(t testing.TB, pool *pgxpool.Pool, consumer, eventID string) string {
	t.Helper()
	var result string
	err := pool.QueryRow(t.Context(), `SELECT result_code FROM inbox_dedup WHERE consumer_name = $1 AND event_id = $2`, consumer, eventID).Scan(&result)
	if errors.Is(err, pgx.ErrNoRows) {
		return ""
	}
	require.NoError(t, err)
	return result
}

// Timeline is a task's states in version order.
func Timeline(t *testing.T, pool *pgxpool.Pool, id uuid.UUID) []task.Status {
	t.Helper()
	rows, err := pool.Query(t.Context(), `SELECT to_status FROM task_events WHERE task_id = $1 ORDER BY version`, id)
	require.NoError(t, err)
	got, err := pgx.CollectRows(rows, pgx.RowTo[task.Status])
	require.NoError(t, err)
	return got
}

// NewRedis connects to the test Redis (REDIS_URL); closed when the test
// ends.
func NewRedis(t *testing.T) *redis.Client {
	t.Helper()
	opts, err := redis.ParseURL(servicetest.Env(t, "Redis", "REDIS_URL"))
	require.NoError(t, err)
	rdb := redis.NewClient(opts)
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// DeleteKeys removes every key under prefix: a test's slots and progress.
func DeleteKeys(rdb *redis.Client, prefix string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	iter := rdb.Scan(ctx, 0, prefix+"*", 100).Iterator()
	for iter.Next(ctx) {
		if err := rdb.Del(ctx, iter.Val()).Err(); err != nil {
			return err
		}
	}
	return iter.Err()
}

// NewStore opens the test S3 server (S3_* variables) on [Bucket].
func NewStore(t testing.TB) *blob.Store {
	t.Helper()
	servicetest.Env(t, "S3 server", "S3_ENDPOINT")
	servicetest.Env(t, "S3 server", "S3_ACCESS_KEY_ID")
	servicetest.Env(t, "S3 server", "S3_SECRET_ACCESS_KEY")
	var cfg config.S3
	require.NoError(t, config.Load(&cfg))
	cfg.Bucket = Bucket
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	store, err := blob.New(ctx, cfg)
	require.NoError(t, err)
	require.NoError(t, store.EnsureBucket(ctx))
	return store
}

// RemoveAfter deletes the objects under keys when the test ends.
func RemoveAfter(t testing.TB, store *blob.Store, keys ...string) {
	t.Helper()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		for _, key := range keys {
			require.NoError(t, store.Delete(ctx, key))
		}
	})
}

// NewTool runs the ffmpeg and ffprobe the tests find.
func NewTool(t testing.TB) *media.Tool {
	t.Helper()
	return media.New(config.Media{FFmpegPath: mediatest.FFmpeg(t), FFprobePath: mediatest.FFprobe(t)})
}

// ToolRuns counts the ffmpeg and ffprobe processes a [CountingTool] ran.
type ToolRuns struct{ log string }

// Count is how many runs have started so far, of either binary.
func (r ToolRuns) Count(t *testing.T) int {
	t.Helper()
	b, err := os.ReadFile(r.log)
	if errors.Is(err, fs.ErrNotExist) {
		return 0
	}
	require.NoError(t, err)
	return bytes.Count(b, []byte("\n"))
}

// CountingTool is [NewTool] whose ffmpeg and ffprobe are wrapped in a
// script that writes a line per run before it becomes the real binary
// (exec: a deadline still kills ffmpeg itself). A test counts real runs
// with it, the costly work a duplicate delivery must not do again.
func CountingTool(t testing.TB) (*media.Tool, ToolRuns) {
	t.Helper()
	dir := t.TempDir()
	runs := ToolRuns{log: filepath.Join(dir, "runs")}
	wrap := func(name, bin string) string {
		real, err := exec.LookPath(bin)
		require.NoError(t, err)
		script := filepath.Join(dir, name)
		body := fmt.Sprintf("#!/bin/sh\necho %s >> '%s'\nexec '%s' \"$@\"\n", name, runs.log, real)
		require.NoError(t, os.WriteFile(script, []byte(body), 0o755))
		return script
	}
	tool := media.New(config.Media{FFmpegPath: wrap("ffmpeg", mediatest.FFmpeg(t)), FFprobePath: wrap("ffprobe", mediatest.FFprobe(t))})
	return tool, runs
}

// IdentityMismatches reads aivedio_provider_identity_mismatches_total for
// one provider and place, 0 before the first.
func IdentityMismatches(t *testing.T, providerName, where string) float64 {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(provider.IdentityCollector())
	families, err := reg.Gather()
	require.NoError(t, err)
	for _, f := range families {
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["provider"] == providerName && labels["where"] == where {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}
