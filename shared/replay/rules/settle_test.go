package rules

import (
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/shared/billing"
	"github.com/aivedio/pipeline/shared/preview"
	"github.com/aivedio/pipeline/shared/task"
)

func TestSettle(t *testing.T) {
	t.Parallel()
	held := preview.Effects{Reservation: &billing.Reservation{Status: "HELD", Amount: 40}}
	captured := preview.Effects{Reservation: &billing.Reservation{Status: "CAPTURED", Amount: 40}, Ledger: []billing.LedgerEntry{{Type: "CAPTURE"}}}
	for _, tc := range []struct {
		name    string
		task    task.Task
		effects preview.Effects
		want    preview.Action
		code    string
	}{
		{"capture", task.Task{Status: task.Succeeded}, held, preview.Act, "settle.capture"},
		{"release", task.Task{Status: task.Canceled}, held, preview.Act, "settle.release"},
		{"settled", task.Task{Status: task.Succeeded}, captured, preview.StaleNoop, "settle.already_settled"},
		{"running", task.Task{Status: task.ProviderRunning}, held, preview.StaleNoop, "settle.not_over"},
		{"needs attention", task.Task{Status: task.NeedsAttention}, held, preview.StaleNoop, "settle.not_over"},
		{"without reservation", task.Task{Status: task.Failed}, preview.Effects{}, preview.Refuse, "billing.no_reservation"},
	} {
		v := decideSettle(preview.State{Task: tc.task, Effects: tc.effects}, task.SettleRequested{})
		require.Equal(t, tc.want, v.Action, "%s: %s", tc.name, v.Reason)
		require.Equal(t, tc.code, v.Code, tc.name)
	}
}

// A render's settle is refused for replay: the reconciler re-settles it.
func TestSettleRefusesARendersSettle(t *testing.T) {
	t.Parallel()
	id := uuid.New()
	ev, err := task.Origin{Producer: "test"}.EmitFor(task.Aggregate{Type: task.RenderAggregateType, ID: id, TenantID: uuid.New()},
		task.SettleRequested{RenderID: id, Status: task.Succeeded})
	require.NoError(t, err)
	_, v := Settle().Parse(ev.Envelope)
	require.NotNil(t, v)
	require.Equal(t, preview.Refuse, v.Action)
	require.Equal(t, "replay.render", v.Code)
}
