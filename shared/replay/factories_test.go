package replay_test

import (
	"crypto/sha256"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/types"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/shared/billing"
	"github.com/aivedio/pipeline/shared/catalog"
	"github.com/aivedio/pipeline/shared/dbtest"
	"github.com/aivedio/pipeline/shared/envelope"
	"github.com/aivedio/pipeline/shared/outbox"
	"github.com/aivedio/pipeline/shared/preview"
	"github.com/aivedio/pipeline/shared/quarantine"
	"github.com/aivedio/pipeline/shared/replay"
	"github.com/aivedio/pipeline/shared/task"
	"github.com/aivedio/pipeline/shared/tenant"
)

const (
	provider = "fakeprov"
	price    = 40
)

type testBundle struct {
	pool *pgxpool.Pool
	desk *replay.Desk
}

// setup gives the test its own migrated schema: replays commit, lock and
// count rows across transactions.
func setup(t *testing.T) *testBundle {
	t.Helper()
	pool := dbtest.TestSchema(t)
	return &testBundle{pool: pool, desk: replay.NewDesk(pool, fakeRules, nil)}
}

// fakeRules stand in for the stages' previews, which live in
// shared/replay/rules and are tested there. They are as small as the
// tests of planning, approval and execution need: a submit request acts on
// a QUEUED task, a settle request on a HELD reservation, and a fetch
// request is always refused by its stage.
var fakeRules = preview.Rules{
	catalog.GroupSubmit.Name: preview.RuleOf(catalog.EventSubmitRequested, preview.PayloadTask,
		func(s preview.State, _ task.SubmitRequested) preview.Verdict {
			if s.Task.Status == task.Queued {
				return preview.Act.Because("submit.queued", "the task is %s", preview.At(s.Task))
			}
			return preview.StaleNoop.Because("submit.not_queued", "the task is %s", preview.At(s.Task))
		}),
	catalog.GroupSettle.Name: preview.RuleOf(catalog.EventSettleRequested, preview.PayloadTask,
		func(s preview.State, _ task.SettleRequested) preview.Verdict {
			if r := s.Effects.Reservation; r != nil && r.Status == billing.Held {
				return preview.Act.Because("settle.held", "reservation %s is HELD", r.ReservationID)
			}
			return preview.StaleNoop.Because("settle.settled", "the reservation is settled")
		}),
	catalog.GroupFetch.Name: preview.RuleOf(catalog.EventFetchRequested,
		func(envelope.Envelope, task.FetchRequested) (uuid.UUID, error) {
			return uuid.Nil, preview.Refusal("fetch.refused", "the fake fetch stage refuses every event")
		},
		func(preview.State, task.FetchRequested) preview.Verdict { panic("a refused event is not decided") }),
}

// tenant creates a tenant with credits.
func (b *testBundle) tenant(t *testing.T) uuid.UUID {
	t.Helper()
	var c tenant.Created
	require.NoError(t, pgx.BeginFunc(t.Context(), b.pool, func(tx pgx.Tx) error {
		var err error
		c, err = tenant.Create(t.Context(), tx, tenant.NewTenant{Name: "acme", Credits: 1000}, tenant.RoleTenant)
		return err
	}))
	return c.TenantID
}

// taskAt creates a task of tenantID with its reservation, as the API does,
// and moves it to status the way the stages do: an attempt before
// SUBMITTING, the remote job at PROVIDER_RUNNING, the output asset at
// MEDIA_PROCESSING. It returns the task and the submit event the API wrote.
func (b *testBundle) taskAt(t *testing.T, tenantID uuid.UUID, status task.Status) (task.Task, envelope.Envelope) {
	t.Helper()
	ctx := t.Context()
	var (
		cur    task.Task
		submit envelope.Envelope
	)
	hash := sha256.Sum256([]byte(uuid.NewString()))
	require.NoError(t, pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		var err error
		cur, _, err = task.Create(ctx, tx, task.Origin{Producer: "api"}, task.New{
			TenantID: tenantID, IdempotencyKey: uuid.NewString(), RequestHash: hash[:],
			Model: "acme/video-1", Prompt: "a cat", DurationSeconds: 4, Resolution: "1280x720",
		})
		if err != nil {
			return err
		}
		ev, err := task.Origin{Producer: "api"}.Emit(cur, task.SubmitRequested{TaskID: cur.ID, Version: cur.Version})
		if err != nil {
			return err
		}
		submit = ev.Envelope
		if err := outbox.Write(ctx, tx, ev); err != nil {
			return err
		}
		return billing.Reserve(ctx, tx, tenantID, cur.ID, price)
	}))
	path := []task.Status{task.Submitting, task.ProviderRunning, task.Fetching, task.MediaProcessing, task.Succeeded}
	switch status {
	case task.Queued:
		path = nil
	case task.Failed:
		path = []task.Status{task.Failed}
	default:
		for i, s := range path {
			if s == status {
				path = path[:i+1]
			}
		}
	}
	o := task.Origin{Producer: "test"}
	for _, to := range path {
		require.NoError(t, pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
			var err error
			tr := task.Transition{To: to}
			switch to {
			case task.Submitting:
				_, err = tx.Exec(ctx, `INSERT INTO task_attempts (task_id, attempt_no, provider, model, provider_idempotency_key, client_request_id)
					VALUES ($1::uuid, 1, $2, $3, $1::uuid::text || '-1', gen_random_uuid()::text)`, cur.ID, provider, cur.Model)
				tr.Set.Provider = task.Ptr(provider)
			case task.ProviderRunning:
				_, err = tx.Exec(ctx, `UPDATE task_attempts SET status = 'ACCEPTED', provider_job_id = 'job-' || $1::uuid::text, response_at = now()
					WHERE task_id = $1::uuid`, cur.ID)
				tr.Set.ProviderJobID = task.Ptr("job-" + cur.ID.String())
				tr.Set.NextPollAt = task.Ptr(time.Now().Add(time.Minute).UTC().Truncate(time.Microsecond))
			case task.MediaProcessing:
				_, err = tx.Exec(ctx, `INSERT INTO assets (tenant_id, task_id, kind, object_key, checksum_sha256, size_bytes, content_type)
					VALUES ($1, $2::uuid, 'SOURCE', $2::uuid::text || '/video.mp4', sha256('v'::bytea), 1024, 'video/mp4')`, tenantID, cur.ID)
			}
			if err != nil {
				return err
			}
			cur, err = task.Apply(ctx, tx, o, cur, tr)
			return err
		}))
	}
	return cur, submit
}

// event builds an event about t of one type with payload.
func event(t *testing.T, tk task.Task, eventType string, payload any) envelope.Envelope {
	t.Helper()
	e, err := envelope.New(envelope.NewParams{
		EventType: eventType, Producer: "test", AggregateType: task.AggregateType,
		AggregateID: tk.ID.String(), TenantID: tk.TenantID.String(),
		TraceID: "4bf92f3577b34da6a3ce929d0e0e4736", CorrelationID: tk.ID.String(),
		Payload: payload,
	})
	require.NoError(t, err)
	return e
}

// binary is e as the CloudEvents RocketMQ binding carries it in binary
// mode: CE_ properties and the payload as the body.
func binary(t *testing.T, e envelope.Envelope) (map[string]string, []byte) {
	t.Helper()
	ev, err := e.ToCloudEvent()
	require.NoError(t, err)
	props := map[string]string{
		"CE_specversion": ev.SpecVersion(), "CE_id": ev.ID(), "CE_source": ev.Source(), "CE_type": ev.Type(),
		"CE_subject": ev.Subject(), "CE_time": ev.Time().Format(time.RFC3339Nano), "CE_datacontenttype": ev.DataContentType(),
	}
	for name, v := range ev.Extensions() {
		s, err := types.Format(v)
		require.NoError(t, err)
		props["CE_"+name] = s
	}
	return props, ev.Data()
}

// entry is the quarantine row of e refused by the consumer group g.
func entry(t *testing.T, g catalog.Group, e envelope.Envelope, code string) quarantine.Entry {
	t.Helper()
	props, body := binary(t, e)
	return quarantine.Entry{
		Consumer: g.Name, EventID: e.EventID, MessageID: uuid.NewString(),
		Topic: g.Subscriptions[0].Topic.BrokerName(), Tag: e.EventType,
		ErrorClass: "permanent", ErrorCode: code, ErrorDetail: "refused by the stage",
		DeliveryAttempt: 1, Properties: props, Body: body, Source: quarantine.SourceAdapter,
	}
}

// deadLetter is e's row as the DLQ drain writes it.
func deadLetter(t *testing.T, g catalog.Group, e envelope.Envelope) quarantine.Entry {
	t.Helper()
	q := entry(t, g, e, "max_delivery_attempts")
	q.Topic, q.ErrorClass, q.Source, q.DeliveryAttempt = g.DLQTopic(), "dlq", quarantine.SourceDLQ, g.MaxDeliveryAttempts
	return q
}

// reused is e under another payload with the same event id: a second row
// of the event (the same payload again is a repeat of the first row).
func reused(e quarantine.Entry) quarantine.Entry {
	e.Body = append([]byte(`{"reused":true,`), e.Body[1:]...)
	return e
}

// quarantine writes rows and returns their quarantine ids.
func (b *testBundle) quarantine(t *testing.T, entries ...quarantine.Entry) []uuid.UUID {
	t.Helper()
	var ids []uuid.UUID
	for _, e := range entries {
		written, err := quarantine.Write(t.Context(), b.pool, e)
		require.NoError(t, err)
		require.True(t, written)
		var id uuid.UUID
		require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT quarantine_id FROM message_quarantine WHERE consumer_name = $1 AND message_id = $2`,
			e.Consumer, e.MessageID).Scan(&id))
		ids = append(ids, id)
	}
	return ids
}

func (b *testBundle) count(t *testing.T, sql string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, b.pool.QueryRow(t.Context(), sql, args...).Scan(&n))
	return n
}

// replays reads the outbox rows caused by the event: its replays.
func (b *testBundle) replays(t *testing.T, original string) []outbox.Stored {
	t.Helper()
	rows, err := b.pool.Query(t.Context(), `SELECT `+outbox.Columns+` FROM outbox_events WHERE causation_id = $1 AND producer = 'replay'
		ORDER BY created_at, event_id`, original)
	require.NoError(t, err)
	s, err := outbox.Scan(rows)
	require.NoError(t, err)
	return s
}
