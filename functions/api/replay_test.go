package api_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/cloudevents/sdk-go/v2/types"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/functions/settle"
	"github.com/aivedio/pipeline/functions/submit"
	"github.com/aivedio/pipeline/shared/catalog"
	"github.com/aivedio/pipeline/shared/envelope"
	"github.com/aivedio/pipeline/shared/outbox"
	"github.com/aivedio/pipeline/shared/preview"
	"github.com/aivedio/pipeline/shared/provider"
	"github.com/aivedio/pipeline/shared/quarantine"
	"github.com/aivedio/pipeline/shared/replay"
	"github.com/aivedio/pipeline/shared/task"
	"github.com/aivedio/pipeline/shared/tenant"
)

// replayRoutes are the admin endpoints of quarantine and replay.
var replayRoutes = []struct{ method, path, body string }{
	{http.MethodGet, "/v1/admin/quarantine", ""},
	{http.MethodGet, "/v1/admin/quarantine/" + uuid.NewString(), ""},
	{http.MethodPost, "/v1/admin/quarantine/" + uuid.NewString() + "/discard", `{"ticket":"T","operator":"O","reason":"R"}`},
	{http.MethodPost, "/v1/admin/replays/plan", `{"event_id":"` + uuid.NewString() + `"}`},
	{http.MethodGet, "/v1/admin/replays/" + uuid.NewString(), ""},
	{http.MethodPost, "/v1/admin/replays/" + uuid.NewString() + "/approve", `{"ticket":"T","operator":"O","reason":"R"}`},
	{http.MethodPost, "/v1/admin/replays/" + uuid.NewString() + "/execute", ""},
	{http.MethodPost, "/v1/admin/replays/bulk/plan", `{"consumer":"cg.scheduler.submit.v1"}`},
	{http.MethodPost, "/v1/admin/replays/bulk/approve", `{"consumer":"cg.scheduler.submit.v1","ticket":"T","operator":"O","reason":"R"}`},
	{http.MethodPost, "/v1/admin/replays/bulk/execute", `{"ticket":"T"}`},
}

func TestReplayEndpointsNeedAnAdminKey(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, tenantKey := b.tenant(t, 1000, tenant.RoleTenant)
	for _, rt := range replayRoutes {
		r := b.do(t, rt.method, rt.path, tenantKey, rt.body, "Content-Type", "application/json")
		require.Equal(t, http.StatusForbidden, r.status, "%s %s: %s", rt.method, rt.path, r.body)
		require.Equal(t, "forbidden", r.errorCode(t))
		require.Contains(t, r.message(t), "role admin")

		r = b.do(t, rt.method, rt.path, "", rt.body, "Content-Type", "application/json")
		require.Equal(t, http.StatusUnauthorized, r.status, "%s %s", rt.method, rt.path)
	}
	require.Zero(t, b.count(t, `SELECT count(*) FROM message_replays`))
}

// The whole single-message path through the API, and the real submit stage
// receiving the replay of a submit event for a task already running.
func TestReplayOfStaleSubmitThroughTheAPI(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	_, tenantKey := b.tenant(t, 1000, tenant.RoleTenant)
	_, adminKey := b.tenant(t, 0, tenant.RoleAdmin)
	id := b.createTask(t, tenantKey)
	_, err := b.pool.Exec(ctx, `INSERT INTO task_attempts (task_id, attempt_no, provider, model, provider_idempotency_key, client_request_id, provider_job_id, status)
		VALUES ($1::uuid, 1, $2, $3, $1::uuid::text || '-1', 'c-1', 'job-1', 'ACCEPTED')`, id, fakeProvider, testModel)
	require.NoError(t, err)
	b.move(t, id, task.Submitting, task.ProviderRunning)
	original := b.submitEvent(t, id)
	qid := b.quarantineEvent(t, catalog.GroupSubmit, original)

	admin := func(method, path, body string) response {
		t.Helper()
		return b.do(t, method, path, adminKey, body, "Content-Type", "application/json")
	}
	list := admin(http.MethodGet, "/v1/admin/quarantine?consumer="+catalog.GroupSubmit.Name+"&since=1h", "")
	require.Equal(t, http.StatusOK, list.status, "%s", list.body)
	require.Contains(t, string(list.body), qid.String())
	show := admin(http.MethodGet, "/v1/admin/quarantine/"+qid.String(), "")
	require.Equal(t, http.StatusOK, show.status, "%s", show.body)
	require.Equal(t, original.EventID, show.json(t)["event"].(map[string]any)["event_id"])

	plan := admin(http.MethodPost, "/v1/admin/replays/plan", `{"event_id":"`+original.EventID+`","operator":"alice"}`)
	require.Equal(t, http.StatusCreated, plan.status, "%s", plan.body)
	var rep replay.Report
	require.NoError(t, json.Unmarshal(plan.body, &rep))
	require.Equal(t, preview.StaleNoop, rep.Verdict.Action, rep.Verdict.Reason)
	require.Equal(t, "PROVIDER_RUNNING", rep.Task.Status)
	require.Equal(t, "job-1", rep.Effects.Attempts[0].ProviderJobID)
	require.Equal(t, "/v1/admin/replays/"+rep.ReplayID.String(), plan.header.Get("Location"))
	replayPath := "/v1/admin/replays/" + rep.ReplayID.String()

	r := admin(http.MethodPost, replayPath+"/execute", "")
	require.Equal(t, http.StatusConflict, r.status)
	require.Equal(t, "replay_not_approved", r.errorCode(t))
	r = admin(http.MethodPost, replayPath+"/approve", `{"ticket":"OPS-7","operator":"bob"}`)
	require.Equal(t, http.StatusBadRequest, r.status)
	require.Equal(t, "invalid_field", r.errorCode(t))
	require.Contains(t, r.message(t), "reason is required")

	// The key that planned the replay cannot approve it, whoever it names.
	r = admin(http.MethodPost, replayPath+"/approve", `{"ticket":"OPS-7","operator":"bob","reason":"provider fixed"}`)
	require.Equal(t, http.StatusForbidden, r.status, "%s", r.body)
	require.Equal(t, "replay_same_planner", r.errorCode(t))
	require.Contains(t, r.message(t), "another admin key")
	_, approverKey := b.tenant(t, 0, tenant.RoleAdmin)
	approver := func(method, path, body string) response {
		t.Helper()
		return b.do(t, method, path, approverKey, body, "Content-Type", "application/json")
	}
	r = approver(http.MethodPost, replayPath+"/approve", `{"ticket":"OPS-7","operator":"bob","reason":"provider fixed"}`)
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	require.Equal(t, string(replay.StatusApproved), r.json(t)["status"])
	r = approver(http.MethodPost, replayPath+"/approve", `{"ticket":"OPS-7","operator":"bob","reason":"provider fixed"}`)
	require.Equal(t, http.StatusConflict, r.status)
	require.Equal(t, "replay_decided", r.errorCode(t))

	r = admin(http.MethodPost, replayPath+"/execute", `{"operator":"carol"}`)
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	var x replay.Execution
	require.NoError(t, json.Unmarshal(r.body, &x))
	require.False(t, x.AlreadyExecuted)
	r = admin(http.MethodPost, replayPath+"/execute", "")
	require.Equal(t, http.StatusOK, r.status)
	require.Equal(t, true, r.json(t)["already_executed"])
	sent := b.replayEvents(t, original.EventID)
	require.Len(t, sent, 1)
	require.Equal(t, x.ReplayEventID.String(), sent[0].EventID)

	// The submit stage receives the replay: a stale no-op, no provider
	// call, no second attempt.
	prov := &countingProvider{}
	stage := submit.New(submit.Params{Pool: b.pool, Providers: provider.Single(prov), Timeout: time.Second})
	b.deliver(t, stage, sent[0])
	require.Zero(t, prov.submits.Load(), "no second generation")
	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM task_attempts WHERE task_id = $1`, id))
	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM inbox_dedup WHERE consumer_name = $1 AND event_id = $2 AND result_code = 'STALE_NOOP'`,
		catalog.GroupSubmit.Name, sent[0].EventID))

	// The audit names the people and the key.
	r = admin(http.MethodGet, replayPath, "")
	require.Equal(t, http.StatusOK, r.status)
	var audited replay.Replay
	require.NoError(t, json.Unmarshal(r.body, &audited))
	require.Equal(t, replay.StatusExecuted, audited.Status)
	require.Equal(t, "OPS-7", audited.Ticket)
	require.Len(t, audited.Steps, 3)
	for i, who := range []string{"alice", "bob", "carol"} {
		require.True(t, strings.HasPrefix(audited.Steps[i].Operator, who+" (api key "), audited.Steps[i].Operator)
	}

	// Replayed, the message cannot be discarded too.
	r = admin(http.MethodPost, "/v1/admin/quarantine/"+qid.String()+"/discard", `{"ticket":"OPS-8","operator":"dan","reason":"late"}`)
	require.Equal(t, http.StatusConflict, r.status, "%s", r.body)
	require.Equal(t, "quarantine_closed", r.errorCode(t))
	require.Contains(t, r.message(t), "REPLAYED already")
}

// TestDiscardThroughTheAPI: an admin closes a message for good under a
// ticket; the audit names the person and the key, and the list shows it.
func TestDiscardThroughTheAPI(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, tenantKey := b.tenant(t, 1000, tenant.RoleTenant)
	_, adminKey := b.tenant(t, 0, tenant.RoleAdmin)
	id := b.createTask(t, tenantKey)
	qid := b.quarantineEvent(t, catalog.GroupSubmit, b.submitEvent(t, id))
	r := b.do(t, http.MethodPost, "/v1/admin/quarantine/"+qid.String()+"/discard", adminKey,
		`{"ticket":"OPS-9","operator":"bob","reason":"load-test traffic"}`, "Content-Type", "application/json")
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	var d replay.Discarded
	require.NoError(t, json.Unmarshal(r.body, &d))
	require.EqualValues(t, 1, d.Rows)
	require.True(t, strings.HasPrefix(d.Discard.Operator, "bob (api key "), d.Discard.Operator)

	r = b.do(t, http.MethodGet, "/v1/admin/quarantine?status=DISCARDED&category=dependency", adminKey, "")
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	var listed struct{ Items []quarantine.Message }
	require.NoError(t, json.Unmarshal(r.body, &listed))
	require.Len(t, listed.Items, 1)
	require.Equal(t, "OPS-9", listed.Items[0].Discard.Ticket)
	require.Equal(t, "team-generation", listed.Items[0].Owner)
}

func TestBulkReplayThroughTheAPIChargesOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, tenantKey := b.tenant(t, 1000, tenant.RoleTenant)
	_, adminKey := b.tenant(t, 0, tenant.RoleAdmin)
	done, running := b.createTask(t, tenantKey), b.createTask(t, tenantKey)
	b.move(t, done, task.Submitting, task.ProviderRunning, task.Fetching, task.MediaProcessing, task.Succeeded)
	b.move(t, running, task.Submitting, task.ProviderRunning)
	settles := []envelope.Envelope{b.settleEvent(t, done), b.settleEvent(t, running)}
	for _, ev := range settles {
		b.quarantineEvent(t, catalog.GroupSettle, ev)
	}
	admin := func(path, body string) response {
		t.Helper()
		return b.do(t, http.MethodPost, path, adminKey, body, "Content-Type", "application/json")
	}

	filter := `"consumer":"` + catalog.GroupSettle.Name + `","error_class":"dlq","since":"1h"`
	r := admin("/v1/admin/replays/bulk/plan", `{`+filter+`}`)
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	var dry replay.BulkReport
	require.NoError(t, json.Unmarshal(r.body, &dry))
	require.Equal(t, 2, dry.Messages)
	require.Equal(t, map[preview.Action]int{preview.Act: 1, preview.StaleNoop: 1, preview.Refuse: 0}, dry.Counts)

	decision := `"ticket":"OPS-9","operator":"bob","reason":"settle backlog after the outage"`
	r = admin("/v1/admin/replays/bulk/approve", `{`+filter+`,`+decision+`,"expect":3}`)
	require.Equal(t, http.StatusConflict, r.status)
	require.Equal(t, "quarantine_changed", r.errorCode(t))
	r = admin("/v1/admin/replays/bulk/approve", `{`+filter+`,`+decision+`,"expect":2}`)
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	require.EqualValues(t, 2, r.json(t)["approved"])

	r = admin("/v1/admin/replays/bulk/execute", `{"ticket":"OPS-9","operator":"carol"}`)
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	var x replay.BulkExecution
	require.NoError(t, json.Unmarshal(r.body, &x))
	require.Len(t, x.Executed, 2)
	require.Empty(t, x.Failed)

	// The settle stage receives each replay twice and the originals late:
	// the finished task is charged once, the running one not at all.
	stage := settle.New(settle.Params{Pool: b.pool})
	for _, orig := range settles {
		sent := b.replayEvents(t, orig.EventID)
		require.Len(t, sent, 1)
		b.deliver(t, stage, sent[0])
		b.deliver(t, stage, sent[0])
		b.deliver(t, stage, orig)
	}
	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM credit_ledger WHERE ledger_business_type = 'CAPTURE'`))
	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM credit_reservations WHERE task_id = $1 AND status = 'CAPTURED'`, done))
	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM credit_reservations WHERE task_id = $1 AND status = 'HELD'`, running))
}

func TestReplayEndpointsExplainBadRequests(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, adminKey := b.tenant(t, 0, tenant.RoleAdmin)
	for _, tc := range []struct {
		method, path, body string
		status             int
		code, message      string
	}{
		{http.MethodGet, "/v1/admin/quarantine?colour=red", "", 400, "invalid_field", `unknown query parameter "colour"`},
		{http.MethodGet, "/v1/admin/quarantine?limit=all", "", 400, "invalid_field", "limit must be an integer"},
		{http.MethodGet, "/v1/admin/quarantine?limit=0", "", 400, "invalid_field", "limit must be an integer from 1 to 1000"},
		{http.MethodGet, "/v1/admin/quarantine?limit=5000", "", 400, "invalid_field", "limit must be from 1 to 1000"},
		{http.MethodGet, "/v1/admin/quarantine?since=yesterday", "", 400, "invalid_field", "since: time"},
		{http.MethodGet, "/v1/admin/quarantine?status=LOST", "", 400, "invalid_field", "status"},
		{http.MethodGet, "/v1/admin/quarantine/q-1", "", 400, "invalid_id", "is not a quarantine id"},
		{http.MethodGet, "/v1/admin/quarantine/" + uuid.NewString(), "", 404, "not_found", "no quarantined message"},
		{http.MethodGet, "/v1/admin/quarantine?category=BAD_LUCK", "", 400, "invalid_field", `category "BAD_LUCK"`},
		{http.MethodPost, "/v1/admin/quarantine/" + uuid.NewString() + "/discard", `{"operator":"O","reason":"R"}`, 400, "invalid_field", "ticket is required"},
		{http.MethodPost, "/v1/admin/quarantine/" + uuid.NewString() + "/discard", `{"ticket":"T","reason":"R"}`, 400, "invalid_field", "operator is required"},
		{http.MethodPost, "/v1/admin/quarantine/" + uuid.NewString() + "/discard", `{"ticket":"T","operator":"O","reason":"R"}`, 404, "not_found", "no quarantined message"},
		{http.MethodPost, "/v1/admin/replays/plan", `{}`, 400, "invalid_field", "exactly one of event_id and quarantine_id"},
		{http.MethodPost, "/v1/admin/replays/plan", `{"event_id":"e-1"}`, 400, "invalid_field", `event_id "e-1" is not a UUID`},
		{http.MethodPost, "/v1/admin/replays/plan", `{"event_id":"` + uuid.NewString() + `","ticket":"T"}`, 400, "unknown_field", `unknown field "ticket"`},
		{http.MethodPost, "/v1/admin/replays/plan", `{"event_id":"` + uuid.NewString() + `"}`, 404, "not_found", "no message in quarantine"},
		{http.MethodPost, "/v1/admin/replays/" + uuid.NewString() + "/approve", `{"ticket":"T","reason":"R"}`, 400, "invalid_field", "operator is required"},
		{http.MethodPost, "/v1/admin/replays/" + uuid.NewString() + "/approve", `{"ticket":"none","operator":"O","reason":"R"}`, 400, "invalid_field", `ticket "none"`},
		{http.MethodPost, "/v1/admin/replays/" + uuid.NewString() + "/approve", `{"ticket":"T","operator":"O","reason":"R"}`, 404, "not_found", "no replay"},
		{http.MethodPost, "/v1/admin/replays/" + uuid.NewString() + "/execute", `{"operator":"O"}`, 404, "not_found", "no replay"},
		{http.MethodPost, "/v1/admin/replays/bulk/plan", `{}`, 400, "invalid_field", "needs a consumer group"},
		{http.MethodPost, "/v1/admin/replays/bulk/plan", `{"consumer":"cg.nope.v1"}`, 400, "invalid_field", "not in the catalog"},
		{http.MethodPost, "/v1/admin/replays/bulk/plan", `{"consumer":"cg.billing.settle.v1","ticket":"T"}`, 400, "invalid_field", "belong to POST /v1/admin/replays/bulk/approve"},
		{http.MethodPost, "/v1/admin/replays/bulk/approve", `{"consumer":"cg.billing.settle.v1","operator":"O","reason":"R"}`, 400, "invalid_field", "ticket is required"},
		{http.MethodPost, "/v1/admin/replays/bulk/execute", `{}`, 400, "invalid_field", "ticket is required"},
		{http.MethodDelete, "/v1/admin/replays/" + uuid.NewString(), "", 405, "method_not_allowed", "use GET"},
	} {
		r := b.do(t, tc.method, tc.path, adminKey, tc.body, "Content-Type", "application/json")
		require.Equal(t, tc.status, r.status, "%s %s: %s", tc.method, tc.path, r.body)
		require.Equal(t, tc.code, r.errorCode(t), "%s %s", tc.method, tc.path)
		require.Contains(t, r.message(t), tc.message, "%s %s", tc.method, tc.path)
	}
}

// submitEvent reads the submit event the API wrote for a task.
func (b *testBundle) submitEvent(t *testing.T, id uuid.UUID) envelope.Envelope {
	t.Helper()
	rows, err := b.pool.Query(t.Context(), `SELECT `+outbox.Columns+` FROM outbox_events WHERE aggregate_id = $1 AND event_type = $2`,
		id.String(), catalog.EventSubmitRequested)
	require.NoError(t, err)
	s, err := pgx.CollectExactlyOneRow(rows, outbox.ScanStored)
	require.NoError(t, err)
	return s.Envelope
}

// settleEvent is a settle request for a task, as a stage writes it.
func (b *testBundle) settleEvent(t *testing.T, id uuid.UUID) envelope.Envelope {
	t.Helper()
	tk, err := task.Get(t.Context(), b.pool, id)
	require.NoError(t, err)
	ev, err := task.Origin{Producer: "transcode"}.Emit(tk, task.SettleRequested{TaskID: id, Status: tk.Status})
	require.NoError(t, err)
	return ev.Envelope
}

// quarantineEvent writes e's dead letter for group g, as the DLQ drain
// does, with the CloudEvents properties of the RocketMQ binding.
func (b *testBundle) quarantineEvent(t *testing.T, g catalog.Group, e envelope.Envelope) uuid.UUID {
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
	msgID := uuid.NewString()
	_, err = quarantine.Write(t.Context(), b.pool, quarantine.Entry{
		Consumer: g.Name, EventID: e.EventID, MessageID: msgID, Topic: g.DLQTopic(), Tag: e.EventType,
		ErrorClass: "dlq", ErrorCode: "max_delivery_attempts", DeliveryAttempt: g.MaxDeliveryAttempts,
		Properties: props, Body: ev.Data(), Source: quarantine.SourceDLQ,
	})
	require.NoError(t, err)
	var id uuid.UUID
	require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT quarantine_id FROM message_quarantine WHERE message_id = $1`, msgID).Scan(&id))
	return id
}

// replayEvents reads the replays written for an event.
func (b *testBundle) replayEvents(t *testing.T, original string) []envelope.Envelope {
	t.Helper()
	rows, err := b.pool.Query(t.Context(), `SELECT `+outbox.Columns+` FROM outbox_events WHERE causation_id = $1 AND producer = $2`,
		original, replay.Producer)
	require.NoError(t, err)
	stored, err := outbox.Scan(rows)
	require.NoError(t, err)
	out := make([]envelope.Envelope, len(stored))
	for i, s := range stored {
		out[i] = s.Envelope
	}
	return out
}

// handler is a stage function.
type handler interface {
	Handle(ctx context.Context, ev event.Event) (*event.Event, error)
}

// deliver hands e to a stage as the source adapter does, and requires
// success (the adapter would ACK).
func (b *testBundle) deliver(t *testing.T, stage handler, e envelope.Envelope) {
	t.Helper()
	ev, err := e.ToCloudEvent()
	require.NoError(t, err)
	_, err = stage.Handle(t.Context(), ev)
	require.NoError(t, err)
}

// countingProvider counts submits; nothing else may be called.
type countingProvider struct {
	provider.Client
	submits atomic.Int32
}

func (p *countingProvider) Name() string { return fakeProvider }

func (p *countingProvider) Submit(context.Context, provider.SubmitRequest) (provider.Job, error) {
	p.submits.Add(1)
	return provider.Job{}, errors.New("the replay must not reach the provider")
}
