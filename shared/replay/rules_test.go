package replay

import (
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/shared/catalog"
	"github.com/aivedio/pipeline/shared/task"
)

func TestRules(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	pollAt := now.Add(time.Minute)
	later := now.Add(time.Hour)
	asset, other := uuid.New(), uuid.New()
	attemptID := uuid.New()
	open := Effects{Attempts: []Attempt{{AttemptNo: 1, AttemptID: attemptID, Status: "SUBMITTING", Provider: "p", IdempotencyKey: "k-1"}}}
	unknown := Effects{Attempts: []Attempt{{AttemptNo: 1, AttemptID: attemptID, Status: "SUBMIT_UNKNOWN", Provider: "p"}}}
	accepted := Effects{Attempts: []Attempt{{AttemptNo: 1, Status: "ACCEPTED", ProviderJobID: "j-1"}}}
	held := Effects{Reservation: &Reservation{Status: "HELD", Amount: 40}}
	captured := Effects{Reservation: &Reservation{Status: "CAPTURED", Amount: 40}, Ledger: []LedgerEntry{{Type: "CAPTURE"}}}
	media := Effects{Assets: []Asset{{AssetID: asset, Kind: "SOURCE"}}}
	withThumb := Effects{Assets: []Asset{{AssetID: asset, Kind: "SOURCE"}, {AssetID: other, Kind: "THUMBNAIL", SourceAssetID: &asset}}}

	for _, tc := range []struct {
		name    string
		group   catalog.Group
		payload any
		task    task.Task
		effects Effects
		want    Action
		code    string
	}{
		{"submit queued", catalog.GroupSubmit, task.SubmitRequested{}, task.Task{Status: task.Queued}, Effects{}, Act, "submit.new_attempt"},
		{"submit queued with open attempt", catalog.GroupSubmit, task.SubmitRequested{}, task.Task{Status: task.Queued}, open, Act, "submit.retry_attempt"},
		{"submit waiting, not due", catalog.GroupSubmit, task.SubmitRequested{}, task.Task{Status: task.WaitingRetry, NextRetryAt: &later}, open, StaleNoop, "submit.not_due"},
		{"submit waiting, due", catalog.GroupSubmit, task.SubmitRequested{}, task.Task{Status: task.WaitingRetry, NextRetryAt: &now}, open, Act, "submit.retry_attempt"},
		{"submit submitting", catalog.GroupSubmit, task.SubmitRequested{}, task.Task{Status: task.Submitting}, open, Act, "submit.resume_attempt"},
		{"submit submitting, no attempt", catalog.GroupSubmit, task.SubmitRequested{}, task.Task{Status: task.Submitting}, Effects{}, StaleNoop, "submit.stale"},
		{"submit running", catalog.GroupSubmit, task.SubmitRequested{}, task.Task{Status: task.ProviderRunning}, accepted, StaleNoop, "submit.stale"},
		{"submit failed", catalog.GroupSubmit, task.SubmitRequested{}, task.Task{Status: task.Failed}, Effects{}, StaleNoop, "submit.stale"},
		{"delayed resubmit overtaken", catalog.GroupSubmit, task.SubmitRequested{Wait: task.Wait{ExpectedStatus: task.WaitingRetry, ExpectedVersion: 3}},
			task.Task{Status: task.WaitingRetry, Version: 5, NextRetryAt: &now}, open, StaleNoop, "submit.stale"},
		{"delayed resubmit that holds", catalog.GroupSubmit, task.SubmitRequested{Wait: task.Wait{ExpectedStatus: task.WaitingRetry, ExpectedVersion: 5}},
			task.Task{Status: task.WaitingRetry, Version: 5, NextRetryAt: &now}, open, Act, "submit.retry_attempt"},
		{"poll due", catalog.GroupPoll, task.PollDue{PollAt: pollAt}, task.Task{Status: task.ProviderRunning, NextPollAt: &pollAt}, accepted, Act, "poll.due"},
		{"poll due after a cancel", catalog.GroupPoll, task.PollDue{PollAt: pollAt}, task.Task{Status: task.ProviderRunning, NextPollAt: &pollAt, CancelRequested: true}, accepted, Act, "poll.cancel"},
		{"poll chain moved", catalog.GroupPoll, task.PollDue{PollAt: now}, task.Task{Status: task.ProviderRunning, NextPollAt: &pollAt}, accepted, StaleNoop, "poll.stale"},
		{"poll after fetch", catalog.GroupPoll, task.PollDue{PollAt: pollAt}, task.Task{Status: task.Fetching, NextPollAt: &pollAt}, accepted, StaleNoop, "poll.stale"},
		{"callback for the job", catalog.GroupCallback, task.CallbackReceived{Provider: "p", ProviderJobID: "j-1"}, task.Task{Status: task.ProviderRunning, Provider: "p", ProviderJobID: "j-1"}, accepted, Act, "callback.apply"},
		{"callback after a cancel", catalog.GroupCallback, task.CallbackReceived{Provider: "p", ProviderJobID: "j-1"}, task.Task{Status: task.ProviderRunning, Provider: "p", ProviderJobID: "j-1", CancelRequested: true}, accepted, Act, "callback.cancel"},
		{"callback for another job", catalog.GroupCallback, task.CallbackReceived{Provider: "p", ProviderJobID: "j-0"}, task.Task{Status: task.ProviderRunning, Provider: "p", ProviderJobID: "j-1"}, accepted, StaleNoop, "callback.stale"},
		{"fetch", catalog.GroupFetch, task.FetchRequested{}, task.Task{Status: task.Fetching}, accepted, Act, "fetch.store"},
		{"fetch stored", catalog.GroupFetch, task.FetchRequested{}, task.Task{Status: task.Fetching}, media, Act, "fetch.record"},
		{"fetch late", catalog.GroupFetch, task.FetchRequested{}, task.Task{Status: task.Succeeded}, media, StaleNoop, "fetch.stale"},
		{"delayed fetch that holds", catalog.GroupFetch, task.FetchRequested{Wait: task.Wait{ExpectedStatus: task.Fetching, ExpectedVersion: 7, RetryAttempt: 2}},
			task.Task{Status: task.Fetching, Version: 7}, accepted, Act, "fetch.store"},
		{"delayed fetch overtaken", catalog.GroupFetch, task.FetchRequested{Wait: task.Wait{ExpectedStatus: task.Fetching, ExpectedVersion: 7, RetryAttempt: 2}},
			task.Task{Status: task.Fetching, Version: 8}, accepted, StaleNoop, "fetch.stale"},
		{"probe", catalog.GroupProbe, task.Postprocess{AssetID: asset, Step: catalog.TagProbe}, task.Task{Status: task.MediaProcessing}, media, Act, "probe.run"},
		{"probe of another task's asset", catalog.GroupProbe, task.Postprocess{AssetID: other, Step: catalog.TagProbe}, task.Task{Status: task.MediaProcessing}, media, Refuse, "asset.wrong_task"},
		{"thumbnail made", catalog.GroupTranscode, task.Postprocess{AssetID: asset, Step: catalog.TagThumbnail}, task.Task{Status: task.MediaProcessing}, withThumb, Act, "transcode.record"},
		{"proxy to make", catalog.GroupTranscode, task.Postprocess{AssetID: asset, Step: catalog.TagTranscodeProxy}, task.Task{Status: task.MediaProcessing}, withThumb, Act, "transcode.run"},
		{"transcode late", catalog.GroupTranscode, task.Postprocess{AssetID: asset, Step: catalog.TagThumbnail}, task.Task{Status: task.Succeeded}, withThumb, StaleNoop, "transcode.stale"},
		{"waveform retried in the background", catalog.GroupTranscode, task.Postprocess{AssetID: asset, Step: catalog.TagWaveform}, task.Task{Status: task.Succeeded, MissingDerivatives: []string{"WAVEFORM"}}, withThumb, Act, "transcode.background"},
		{"probe never in the background", catalog.GroupProbe, task.Postprocess{AssetID: asset, Step: catalog.TagProbe}, task.Task{Status: task.Succeeded, MissingDerivatives: []string{"WAVEFORM"}}, media, StaleNoop, "probe.stale"},
		{"settle capture", catalog.GroupSettle, task.SettleRequested{}, task.Task{Status: task.Succeeded}, held, Act, "settle.capture"},
		{"settle release", catalog.GroupSettle, task.SettleRequested{}, task.Task{Status: task.Canceled}, held, Act, "settle.release"},
		{"settle settled", catalog.GroupSettle, task.SettleRequested{}, task.Task{Status: task.Succeeded}, captured, StaleNoop, "settle.already_settled"},
		{"settle running", catalog.GroupSettle, task.SettleRequested{}, task.Task{Status: task.ProviderRunning}, held, StaleNoop, "settle.not_over"},
		{"settle needs attention", catalog.GroupSettle, task.SettleRequested{}, task.Task{Status: task.NeedsAttention}, held, StaleNoop, "settle.not_over"},
		{"settle without reservation", catalog.GroupSettle, task.SettleRequested{}, task.Task{Status: task.Failed}, Effects{}, Refuse, "billing.no_reservation"},
		{"notify", catalog.GroupNotify, task.StateChanged{To: task.Fetching, Version: 4}, task.Task{Status: task.Succeeded, Version: 7}, Effects{}, Act, "notify.push"},
		{"reconcile", catalog.GroupReconcile, task.ReconcileDue{AttemptID: attemptID}, task.Task{Status: task.Reconciling}, unknown, Act, "reconcile.lookup"},
		{"reconcile resolved", catalog.GroupReconcile, task.ReconcileDue{AttemptID: attemptID}, task.Task{Status: task.Reconciling}, open, StaleNoop, "reconcile.stale"},
		{"reconcile late", catalog.GroupReconcile, task.ReconcileDue{AttemptID: attemptID}, task.Task{Status: task.ProviderRunning}, unknown, StaleNoop, "reconcile.stale"},
		{"reconcile a cancel", catalog.GroupReconcile, task.ReconcileDue{AttemptID: attemptID, Wait: task.Wait{Reason: task.ReasonCancel}}, task.Task{Status: task.CancelReconciling, ProviderJobID: "j-1"}, accepted, Act, "reconcile.cancel_look"},
		{"reconcile a decided cancel", catalog.GroupReconcile, task.ReconcileDue{AttemptID: attemptID, Wait: task.Wait{Reason: task.ReasonCancel}}, task.Task{Status: task.Canceled}, accepted, StaleNoop, "reconcile.stale"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var v Verdict
			s := state{task: tc.task, effects: tc.effects, now: now}
			switch p := tc.payload.(type) {
			case task.SubmitRequested:
				v = decideSubmit(s, p)
			case task.PollDue:
				v = decidePoll(s, p)
			case task.CallbackReceived:
				v = decideCallback(s, p)
			case task.FetchRequested:
				v = decideFetch(s, p)
			case task.Postprocess:
				v = decideMedia(tc.group.Stage)(s, p)
			case task.SettleRequested:
				v = decideSettle(s, p)
			case task.StateChanged:
				v = decideNotify(s, p)
			case task.ReconcileDue:
				v = decideReconcile(s, p)
			}
			require.Equal(t, tc.want, v.Action, v.Reason)
			require.Equal(t, tc.code, v.Code)
			require.NotEmpty(t, v.Reason)
			require.Equal(t, tc.group.Name != "", rules[tc.group.Name].eventType != "", "every stage group has a rule")
		})
	}
}

// Every consumer group a stage serves has a rule, except render, which has
// no stage in this build.
func TestEveryGroupHasARule(t *testing.T) {
	t.Parallel()
	for _, g := range catalog.Groups() {
		_, ok := rules[g.Name]
		require.Equal(t, g.Name != catalog.GroupRender.Name, ok, g.Name)
	}
}
