package api_test

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/shared/catalog"
	"github.com/aivedio/pipeline/shared/preview"
	"github.com/aivedio/pipeline/shared/replay"
	"github.com/aivedio/pipeline/shared/tenant"
)

// TestReplayOutsideTheWindowIsAConflict: the dry run of an event older
// than REPLAY_WINDOW shows the refusal, and approving it answers 409
// replay_outside_window with the reason; nothing is sent.
func TestReplayOutsideTheWindowIsAConflict(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, tenantKey := b.tenant(t, 1000, tenant.RoleTenant)
	_, adminKey := b.tenant(t, 0, tenant.RoleAdmin)
	id := b.createTask(t, tenantKey)
	original := b.submitEvent(t, id)
	qid := b.quarantineEvent(t, catalog.GroupSubmit, original)
	_, err := b.pool.Exec(t.Context(), `UPDATE message_quarantine SET received_at = now() - interval '9 days' WHERE quarantine_id = $1`, qid)
	require.NoError(t, err)
	_, err = b.pool.Exec(t.Context(), `UPDATE outbox_events SET created_at = now() - interval '9 days' WHERE event_id = $1`, original.EventID)
	require.NoError(t, err)

	plan := b.do(t, http.MethodPost, "/v1/admin/replays/plan", adminKey, `{"quarantine_id":"`+qid.String()+`","operator":"alice"}`,
		"Content-Type", "application/json")
	require.Equal(t, http.StatusCreated, plan.status, "%s", plan.body)
	var rep replay.Report
	require.NoError(t, json.Unmarshal(plan.body, &rep))
	require.Equal(t, preview.Refuse, rep.Verdict.Action)
	require.Equal(t, replay.CodeOutsideWindow, rep.Verdict.Code)
	require.Equal(t, 7*24*time.Hour, rep.ReplayWindow)

	_, approverKey := b.tenant(t, 0, tenant.RoleAdmin)
	r := b.do(t, http.MethodPost, "/v1/admin/replays/"+rep.ReplayID.String()+"/approve", approverKey,
		`{"ticket":"OPS-9","operator":"bob","reason":"customer asked"}`, "Content-Type", "application/json")
	require.Equal(t, http.StatusConflict, r.status, "%s", r.body)
	require.Equal(t, "replay_outside_window", r.errorCode(t))
	require.Contains(t, r.message(t), "9.0 days ago")
	require.Contains(t, r.message(t), "replay window of 7.0 days (REPLAY_WINDOW)")
	require.Contains(t, r.message(t), "could apply it twice")
	require.Empty(t, b.replayEvents(t, original.EventID))
}
