// Package live carries what clients watch while a task runs, through Redis:
// the state changes the notify stage pushes to server-sent-event
// subscribers, and the progress the poll stage records between polls.
//
// Both are best effort by design. Redis pub/sub delivers to whoever listens
// now and drops the rest, so a slow or absent subscriber never slows the
// chain; PostgreSQL keeps the facts (task_events), and a client that missed
// something reads the task. The notify stage runs at least once per change
// and pushes each version of a task once ([PublishNewer]); a repeat can
// still arrive after Redis lost its data, so each change carries its task
// version for clients to drop what they have seen.
package live

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"
)

// KeyPrefix starts every key and channel this package uses.
const KeyPrefix = "aivedio:live:"

// Change is one state change as subscribers see it: of a generation task,
// or (RenderID) of a render.
type Change struct {
	EventID   string    `json:"event_id"`
	TaskID    uuid.UUID `json:"task_id,omitzero"`
	RenderID  uuid.UUID `json:"render_id,omitzero"`
	TenantID  uuid.UUID `json:"tenant_id"`
	From      string    `json:"from,omitempty"`
	To        string    `json:"to"`
	Version   int64     `json:"version"`
	Progress  int       `json:"progress"`
	ErrorCode string    `json:"error_code,omitempty"`
	At        time.Time `json:"at"`
}

// Subject is what changed: the task, or the render.
func (c Change) Subject() uuid.UUID {
	if c.RenderID != uuid.Nil {
		return c.RenderID
	}
	return c.TaskID
}

// tenantPrefix starts every tenant's [Channel].
const tenantPrefix = KeyPrefix + "tenant:"

// AllTenants is the pattern that matches every tenant's [Channel]: one
// subscription serves all tenants (the API's event hub holds one per
// replica, however many streams are open).
const AllTenants = tenantPrefix + "*"

// Channel is the pub/sub channel of one tenant's changes.
func Channel(tenantID uuid.UUID) string { return tenantPrefix + tenantID.String() }

// TenantOf returns the tenant whose [Channel] is channel, and false for
// any other channel, including ones [AllTenants] matches by accident.
func TenantOf(channel string) (uuid.UUID, bool) {
	rest, ok := strings.CutPrefix(channel, tenantPrefix)
	if !ok || len(rest) != 36 {
		return uuid.Nil, false
	}
	id, err := uuid.Parse(rest)
	return id, err == nil && id != uuid.Nil
}

// Publish sends c to the tenant's current subscribers and returns how many
// received it.
func Publish(ctx context.Context, rdb redis.UniversalClient, c Change) (int64, error) {
	data, err := json.Marshal(c)
	if err != nil {
		return 0, fmt.Errorf("encode change: %w", err)
	}
	n, err := rdb.Publish(ctx, Channel(c.TenantID), data).Result()
	if err != nil {
		return 0, fmt.Errorf("publish change of %s: %w", c.Subject(), err)
	}
	return n, nil
}

// publishNewer pushes a change only when its version is above the task's
// last pushed one (KEYS[1]), and records it, in one atomic step: a
// redelivered or replayed change is not pushed again.
var publishNewer = redis.NewScript(`
local seen = tonumber(redis.call('GET', KEYS[1]) or '0')
if tonumber(ARGV[1]) <= seen then
	return -1
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return redis.call('PUBLISH', ARGV[3], ARGV[4])
`)

// PushedVersionTTL is how long the last pushed version of a task is kept:
// a change redelivered within it is pushed once. After it, or after Redis
// lost its data, a repeat may reach clients, which drop versions they
// have seen.
const PushedVersionTTL = 6 * time.Hour

func versionKey(subject uuid.UUID) string { return KeyPrefix + "pushed:" + subject.String() }

// PublishNewer is [Publish] for a change newer than every one pushed for
// its task (or render) so far (within [PushedVersionTTL]); an older or repeated one is
// not pushed, and pushed is false.
func PublishNewer(ctx context.Context, rdb redis.UniversalClient, c Change) (pushed bool, err error) {
	data, err := json.Marshal(c)
	if err != nil {
		return false, fmt.Errorf("encode change: %w", err)
	}
	n, err := publishNewer.Run(ctx, rdb, []string{versionKey(c.Subject())},
		c.Version, PushedVersionTTL.Milliseconds(), Channel(c.TenantID), data).Int64()
	if err != nil {
		return false, fmt.Errorf("publish change of %s: %w", c.Subject(), err)
	}
	return n >= 0, nil
}

// Subscribe listens to one tenant's changes; the caller closes the PubSub.
func Subscribe(ctx context.Context, rdb redis.UniversalClient, tenantID uuid.UUID) *redis.PubSub {
	return rdb.Subscribe(ctx, Channel(tenantID))
}

// Decode reads a published change.
func Decode(payload string) (Change, error) {
	var c Change
	if err := json.Unmarshal([]byte(payload), &c); err != nil {
		return Change{}, fmt.Errorf("decode change: %w", err)
	}
	return c, nil
}

func progressKey(taskID uuid.UUID) string { return KeyPrefix + "progress:" + taskID.String() }

// SetProgress records a running task's progress (0..100) for ttl, instead
// of a database write per poll.
func SetProgress(ctx context.Context, rdb redis.UniversalClient, taskID uuid.UUID, percent int, ttl time.Duration) error {
	percent = max(0, min(100, percent))
	if err := rdb.Set(ctx, progressKey(taskID), percent, ttl).Err(); err != nil {
		return fmt.Errorf("record progress of task %s: %w", taskID, err)
	}
	return nil
}

// Progress returns a task's live progress, if one is recorded.
func Progress(ctx context.Context, rdb redis.UniversalClient, taskID uuid.UUID) (int, bool, error) {
	v, err := rdb.Get(ctx, progressKey(taskID)).Result()
	if err == redis.Nil {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("read progress of task %s: %w", taskID, err)
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return 0, false, fmt.Errorf("read progress of task %s: %q is not a number", taskID, v)
	}
	return n, true, nil
}

func renderProgressKey(renderID uuid.UUID) string {
	return KeyPrefix + "render-progress:" + renderID.String()
}

// SetChunkProgress records how far (microseconds of its output) ffmpeg
// has come in chunk index of a render, for ttl.
func SetChunkProgress(ctx context.Context, rdb redis.UniversalClient, renderID uuid.UUID, index int, doneUS int64, ttl time.Duration) error {
	key := renderProgressKey(renderID)
	_, err := rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.HSet(ctx, key, strconv.Itoa(index), doneUS)
		p.PExpire(ctx, key, ttl)
		return nil
	})
	if err != nil {
		return fmt.Errorf("record progress of render %s: %w", renderID, err)
	}
	return nil
}

// ChunkProgress returns how far ffmpeg has come in each chunk of a render
// that reported progress (microseconds of output, by chunk index).
func ChunkProgress(ctx context.Context, rdb redis.UniversalClient, renderID uuid.UUID) (map[int]int64, error) {
	m, err := rdb.HGetAll(ctx, renderProgressKey(renderID)).Result()
	if err != nil {
		return nil, fmt.Errorf("read progress of render %s: %w", renderID, err)
	}
	out := make(map[int]int64, len(m))
	for k, v := range m {
		i, err1 := strconv.Atoi(k)
		us, err2 := strconv.ParseInt(v, 10, 64)
		if err1 == nil && err2 == nil {
			out[i] = us
		}
	}
	return out, nil
}
