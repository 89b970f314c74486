package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"strings"
	"testing"

	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/adapter/cerocketmq"
	"github.com/aivedio/pipeline/adapter/mq"
	"github.com/aivedio/pipeline/shared/catalog"
	"github.com/aivedio/pipeline/shared/dbtest"
	"github.com/aivedio/pipeline/shared/envelope"
	"github.com/aivedio/pipeline/shared/outbox"
	"github.com/aivedio/pipeline/shared/quarantine"
	"github.com/aivedio/pipeline/shared/replay"
	"github.com/aivedio/pipeline/shared/task"
	"github.com/aivedio/pipeline/shared/tenant"
)

func TestReplayArgumentErrorsSayWhatIsWrong(t *testing.T) {
	t.Parallel()
	id := uuid.NewString()
	cg := catalog.GroupSubmit.Name
	approve := []string{"--approve", "--ticket", "OPS-1", "--operator", "bob", "--reason", "fixed"}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "no arguments"},
		{[]string{"--event", id}, "exactly one of --dry-run, --approve, --execute or --execute-ticket"},
		{[]string{"--event", id, "--dry-run", "--execute"}, "exactly one of --dry-run, --approve"},
		{[]string{"--dry-run"}, "exactly one of --event, --plan, --approval or --bulk"},
		{[]string{"--event", id, "--plan", id, "--dry-run"}, "exactly one of --event, --plan"},
		{[]string{"--event", "task-7", "--dry-run"}, `--event "task-7" is not a UUID`},
		{[]string{"--event", id, "--approve", "--ticket", "T", "--operator", "O"}, "--approve needs --reason"},
		{[]string{"--event", id, "--approve", "--ticket", "T", "--reason", "R"}, "--approve needs --operator"},
		{[]string{"--event", id, "--dry-run", "--ticket", "T"}, "--ticket and --reason go with --approve"},
		{[]string{"--event", id, "--execute"}, "--execute takes --approval <id>"},
		{[]string{"--event", id, "--dry-run", "--class", "dlq"}, "--class select messages for --bulk"},
		{[]string{"--event", id, "--dry-run", "later"}, `unexpected argument "later"`},
		{[]string{"--plan", id, "--dry-run"}, "--plan takes --approve"},
		{[]string{"--approval", id, "--dry-run"}, "--approval takes --execute"},
		{[]string{"--approval", "x", "--execute"}, `--approval "x" is not a UUID`},
		{[]string{"--bulk", "--dry-run"}, "--bulk needs --consumer"},
		{[]string{"--bulk", "--consumer", cg, "--execute"}, "executed by ticket: --execute-ticket T"},
		{[]string{"--bulk", "--consumer", cg, "--dry-run", "--since", "yesterday"}, `--since: invalid quarantine filter: time "yesterday"`},
		{[]string{"--bulk", "--consumer", cg, "--dry-run", "--limit", "0"}, "--limit must be from 1 to 1000"},
		{[]string{"--bulk", "--consumer", cg, "--dry-run", "--expect", "3"}, "--expect goes with --bulk --approve"},
		{append([]string{"--bulk", "--consumer", cg, "--expect", "-1"}, approve...), "--expect must not be negative"},
		{[]string{"--bulk", "--execute-ticket", "OPS-1", "--class", "dlq"}, "--class do not apply to --execute-ticket"},
		{[]string{"--colour", "red"}, "flag provided but not defined: -colour"},
	} {
		err := replayCmd(t.Context(), tc.args, &bytes.Buffer{})
		require.Error(t, err, "%q", tc.args)
		require.ErrorContains(t, err, tc.want, "%q", tc.args)
		require.Contains(t, err.Error(), "usage:", "every argument error shows the usage")
	}
}

func TestQuarantineArgumentErrorsSayWhatIsWrong(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "usage: adapter quarantine list"},
		{[]string{"purge"}, `unknown quarantine command "purge"`},
		{[]string{"show"}, "name one quarantined message"},
		{[]string{"show", "a", "b"}, "name one quarantined message"},
		{[]string{"show", "q-1"}, `quarantine id "q-1" is not a UUID`},
		{[]string{"list", "cg.x"}, `unexpected argument "cg.x"`},
		{[]string{"list", "--limit", "5000"}, "--limit must be from 1 to 1000"},
		{[]string{"list", "--until", "soon"}, `--until: invalid quarantine filter: time "soon"`},
		{[]string{"list", "--category", "BAD_LUCK"}, `category "BAD_LUCK" is not one of`},
		{[]string{"discard"}, "name one quarantined message"},
		{[]string{"discard", "q-1", "--ticket", "T"}, `quarantine id "q-1" is not a UUID`},
	} {
		err := quarantineCmd(t.Context(), tc.args, &bytes.Buffer{})
		require.ErrorContains(t, err, tc.want, "%q", tc.args)
		require.Contains(t, err.Error(), "usage:")
	}
	require.ErrorContains(t, run(t.Context(), []string{"replay"}), "no arguments")
}

// The whole operator path against a real database, through the commands
// and a message the CloudEvents RocketMQ binding wrote, as the adapter
// quarantines it.
func TestReplayCommandsEndToEnd(t *testing.T) {
	url := dbtest.TestSchemaURL(t)
	t.Setenv("DATABASE_URL", url)
	ctx := t.Context()
	pool, err := pgxpool.New(ctx, url)
	require.NoError(t, err)
	t.Cleanup(pool.Close)

	submit := queuedTask(t, pool)
	props, body := bindingMessage(t, submit)
	_, err = quarantine.Write(ctx, pool, quarantine.Entry{
		Consumer: catalog.GroupSubmit.Name, EventID: submit.EventID, MessageID: "msg-1",
		Topic: catalog.GenerationSubmit.BrokerName(), Tag: submit.EventType,
		ErrorCode: "provider.unavailable", DeliveryAttempt: 3, Properties: props, Body: body,
	})
	require.NoError(t, err)

	cmd := func(args ...string) string {
		t.Helper()
		var out bytes.Buffer
		var err error
		if args[0] == "quarantine" {
			err = quarantineCmd(ctx, args[1:], &out)
		} else {
			err = replayCmd(ctx, args[1:], &out)
		}
		require.NoError(t, err, "%q:\n%s", args, out.String())
		return out.String()
	}

	list := cmd("quarantine", "list", "--consumer", catalog.GroupSubmit.Name, "--since", "1h")
	require.Contains(t, list, submit.EventID)
	require.Contains(t, list, "1 message(s)")
	var listed struct{ Items []quarantine.Message }
	require.NoError(t, json.Unmarshal([]byte(cmd("quarantine", "list", "--json")), &listed))
	require.Len(t, listed.Items, 1)
	qid := listed.Items[0].QuarantineID.String()
	require.Contains(t, cmd("quarantine", "show", qid), "CE_tenantid")

	dry := cmd("replay", "--event", submit.EventID, "--dry-run", "--operator", "alice")
	require.Contains(t, dry, "VERDICT  ACT  (submit.new_attempt)")
	require.Contains(t, dry, "topic generation.submit, tag generation.submit.requested")

	var approved replay.Report
	require.NoError(t, json.Unmarshal([]byte(cmd("replay", "--event", qid, "--approve", "--ticket", "OPS-1", "--operator", "bob", "--reason", "provider back", "--json")), &approved))
	require.Equal(t, replay.StatusApproved, approved.Status)

	var x replay.Execution
	require.NoError(t, json.Unmarshal([]byte(cmd("replay", "--approval", approved.ReplayID.String(), "--execute", "--json")), &x))
	require.False(t, x.AlreadyExecuted)
	require.Contains(t, cmd("replay", "--approval", approved.ReplayID.String(), "--execute"), "was executed already")
	var n int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM outbox_events WHERE causation_id = $1`, submit.EventID).Scan(&n))
	require.Equal(t, 1, n)

	bulk := cmd("replay", "--bulk", "--consumer", catalog.GroupSubmit.Name, "--dry-run")
	require.Contains(t, bulk, "0 message(s)")
	require.Contains(t, cmd("replay", "--bulk", "--execute-ticket", "OPS-1"), "0 executed now, 1 executed before")

	// A second approval of the same event is refused, and says why.
	var out bytes.Buffer
	err = replayCmd(ctx, []string{"--event", submit.EventID, "--approve", "--ticket", "OPS-2", "--operator", "bob", "--reason", "again"}, &out)
	require.ErrorIs(t, err, replay.ErrRefused)
	require.Contains(t, out.String(), "REFUSED  (quarantine.replayed)")

	// A message nobody should replay is discarded under a ticket, once.
	_, err = quarantine.Write(ctx, pool, quarantine.Entry{
		Consumer: catalog.GroupSubmit.Name, EventID: uuid.NewString(), MessageID: "msg-2",
		Topic: catalog.GenerationSubmit.BrokerName(), ErrorCode: "payload.invalid", DeliveryAttempt: 1, Body: []byte(`{"api_key":"sk-1"}`),
	})
	require.NoError(t, err)
	list = cmd("quarantine", "list", "--category", "data_defect")
	require.Contains(t, list, "DATA_DEFECT")
	require.Contains(t, list, "team-generation", "the group's owner")
	require.NoError(t, json.Unmarshal([]byte(cmd("quarantine", "list", "--category", "DATA_DEFECT", "--json")), &listed))
	require.Len(t, listed.Items, 1)
	poison := listed.Items[0].QuarantineID.String()
	shown := cmd("quarantine", "show", poison)
	require.Contains(t, shown, "DATA_DEFECT")
	require.Contains(t, shown, `"api_key": "[redacted]"`, "the snapshot is redacted")
	require.NotContains(t, shown, "sk-1", "the body is not printed unless asked for")
	require.Contains(t, cmd("quarantine", "show", poison, "--body"), `{"api_key":"sk-1"}`)
	require.Contains(t, cmd("quarantine", "discard", poison, "--ticket", "OPS-3", "--reason", "load-test traffic", "--operator", "ana"), "discarded "+poison)
	require.Contains(t, cmd("quarantine", "list", "--status", "DISCARDED"), poison)
	require.Contains(t, cmd("quarantine", "show", poison), "under OPS-3: load-test traffic")
	err = quarantineCmd(ctx, []string{"discard", poison, "--ticket", "OPS-3", "--reason", "again"}, &out)
	require.ErrorIs(t, err, replay.ErrNotOpen)
	require.ErrorContains(t, err, "DISCARDED already")
}

// queuedTask creates a tenant and a QUEUED task the way the API does, and
// returns the submit event it wrote.
func queuedTask(t *testing.T, pool *pgxpool.Pool) envelope.Envelope {
	t.Helper()
	ctx := t.Context()
	var submit envelope.Envelope
	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		c, err := tenant.Create(ctx, tx, tenant.NewTenant{Name: "acme", Credits: 100}, tenant.RoleTenant)
		if err != nil {
			return err
		}
		hash := sha256.Sum256([]byte("request"))
		tk, _, err := task.Create(ctx, tx, task.Origin{Producer: "api"}, task.New{
			TenantID: c.TenantID, IdempotencyKey: "k-1", RequestHash: hash[:],
			Model: "acme/video-1", Prompt: "a cat", DurationSeconds: 4, Resolution: "1280x720",
		})
		if err != nil {
			return err
		}
		ev, err := task.Origin{Producer: "api"}.Emit(tk, task.SubmitRequested{TaskID: tk.ID, Version: tk.Version})
		if err != nil {
			return err
		}
		submit = ev.Envelope
		return outbox.Write(ctx, tx, ev)
	}))
	return submit
}

// bindingMessage is e as the relay sends it: written by the CloudEvents
// RocketMQ binding.
func bindingMessage(t *testing.T, e envelope.Envelope) (map[string]string, []byte) {
	t.Helper()
	ev, err := e.ToCloudEvent()
	require.NoError(t, err)
	var m mq.Message
	require.NoError(t, cerocketmq.WriteMessage(context.Background(), binding.ToMessage(&ev), &m))
	require.True(t, strings.HasPrefix(m.Properties["CE_specversion"], "1"))
	return m.Properties, m.Body
}

// TestReplayCommandRefusesAnEventOutsideTheWindow: the command reads
// REPLAY_WINDOW; the dry run shows the event's age beside the window, and
// approving an event older than it fails with ErrOutsideWindow after
// printing why.
func TestReplayCommandRefusesAnEventOutsideTheWindow(t *testing.T) {
	url := dbtest.TestSchemaURL(t)
	t.Setenv("DATABASE_URL", url)
	t.Setenv("REPLAY_WINDOW", "96h")
	ctx := t.Context()
	pool, err := pgxpool.New(ctx, url)
	require.NoError(t, err)
	t.Cleanup(pool.Close)

	submit := queuedTask(t, pool)
	props, body := bindingMessage(t, submit)
	_, err = quarantine.Write(ctx, pool, quarantine.Entry{
		Consumer: catalog.GroupSubmit.Name, EventID: submit.EventID, MessageID: "msg-old",
		Topic: catalog.GenerationSubmit.BrokerName(), Tag: submit.EventType,
		ErrorCode: "provider.unavailable", DeliveryAttempt: 3, Properties: props, Body: body,
	})
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `UPDATE message_quarantine SET received_at = now() - interval '5 days'`)
	require.NoError(t, err)

	var out bytes.Buffer
	require.NoError(t, replayCmd(ctx, []string{"--event", submit.EventID, "--dry-run"}, &out))
	require.Contains(t, out.String(), "replay window (REPLAY_WINDOW) 96h0m0s")
	require.Contains(t, out.String(), "REFUSED  (replay.outside_window)")

	out.Reset()
	err = replayCmd(ctx, []string{"--event", submit.EventID, "--approve", "--ticket", "OPS-3", "--operator", "bob", "--reason", "late"}, &out)
	require.ErrorIs(t, err, replay.ErrOutsideWindow)
	require.Contains(t, err.Error(), "4.0 days (REPLAY_WINDOW)")
	require.Contains(t, out.String(), "could apply it twice")

	t.Setenv("REPLAY_WINDOW", "1h")
	err = replayCmd(ctx, []string{"--event", submit.EventID, "--dry-run"}, &out)
	require.ErrorContains(t, err, "REPLAY_WINDOW must be at least 72h")
}
