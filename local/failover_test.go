package main

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/local/drive"
	"github.com/aivedio/pipeline/local/providersim"
	"github.com/aivedio/pipeline/shared/provider"
)

// failoverGenerations is how many generations the failover journey drives.
const failoverGenerations = 30

// TestFailoverAcrossProvidersStartsOneJobPerTask runs the whole pipeline on
// two providers, Replicate and Runway, each with every simulator fault on:
// 429s, 503s, answers dropped after the job was made, failed jobs, content
// refusals at submit and of outputs, late outputs, and on Runway THROTTLED
// tasks. Replicate fails so often that its circuit opens and new attempts
// go to Runway. Whatever happens, the two providers together start at most
// one remote job per task (counted by the simulators, per unique prompt),
// and every task ends with its money right.
func TestFailoverAcrossProvidersStartsOneJobPerTask(t *testing.T) {
	realServices(t)
	t.Setenv("ROCKETMQ_ENDPOINT", "")
	o := faultyProvider(t)
	o.sim.Rate5xx = 0.3
	o.sim.RateContentRejectSubmit = 0.04
	o.sim.RateContentFail = 0.04
	o.breakerFailures = 2
	o.runwaySim = o.sim
	o.runwaySim.Rate5xx = 0.05
	o.runwaySim.ThrottleAbove = 4
	o.runwaySim.ThrottleFor = 2 * time.Second
	o.runwaySim.Seed = o.sim.Seed + 1

	ctx, cancel := context.WithTimeout(t.Context(), 8*time.Minute)
	defer cancel()
	env, err := start(ctx, o)
	require.NoError(t, err)
	defer env.close()
	require.NotNil(t, env.runwaySim)

	res, err := drive.Run(ctx, drive.Params{APIURL: env.apiURL, Key: env.devKey, N: failoverGenerations, Models: env.models,
		CancelShare: 0.1, Timeout: 6 * time.Minute})
	if err != nil {
		explainStuck(t, env)
	}
	require.NoError(t, err)
	facts := env.facts()
	facts.Failed = drive.FailedUnder(env.reviewSim, env.sim, env.runwaySim)
	rep, err := drive.Check(ctx, facts, res)
	require.NoError(t, err)
	rs, ws := env.sim.Stats(), env.runwaySim.Stats()
	t.Logf("%d generations in %s: %v; attempts %d, failovers %d, remote jobs %d (most per task %d); replicate faults %+v; runway faults %+v",
		len(res.Tasks), res.Elapsed.Round(time.Second), rep.ByStatus, rep.Attempts, rep.Failovers, rep.RemoteJobs, rep.MaxJobsPerTask, rs.Faults, ws.Faults)
	require.Empty(t, rep.Violations)
	require.LessOrEqual(t, rep.MaxJobsPerTask, 1)
	require.Positive(t, ws.JobsCreated, "Replicate's circuit opened and attempts went to Runway")
	require.GreaterOrEqual(t, rep.ByStatus["SUCCEEDED"], failoverGenerations*2/5,
		"a tenth canceled, a tenth refused or failed for content, Runway's dropped answers to a person: most of the rest succeed")

	// Every attempt records its provider. An abandoned attempt made no
	// remote job (no job id; every send it made was refused outright, or a
	// lookup proved none) and is followed by one at the other provider:
	// either way, as the circuits of both open and close under their
	// faults.
	rows, err := env.pool.Query(ctx, `SELECT a.status, a.provider, a.provider_job_id IS NULL, a.sends = a.refused_sends,
			EXISTS (SELECT 1 FROM task_attempts n WHERE n.task_id = a.task_id AND n.attempt_no > a.attempt_no AND n.provider <> a.provider)
		FROM task_attempts a WHERE a.task_id = ANY($1) ORDER BY a.task_id, a.attempt_no`, res.Tasks)
	require.NoError(t, err)
	defer rows.Close()
	for rows.Next() {
		var status, prov string
		var noJob, refused, followed bool
		require.NoError(t, rows.Scan(&status, &prov, &noJob, &refused, &followed))
		require.Contains(t, []string{"replicate", "runway"}, prov)
		if status == "ABANDONED" {
			require.True(t, noJob && refused, "an abandoned attempt at %s made no remote job", prov)
			require.True(t, followed, "an attempt abandoned at %s is followed by one at the other provider", prov)
		}
	}
	require.NoError(t, rows.Err())
	var movedAfterRefusal int
	require.NoError(t, env.pool.QueryRow(ctx, `SELECT count(*) FROM generation_tasks t WHERE t.task_id = ANY($1)
		AND t.error_code = $2 AND (SELECT count(*) FROM task_attempts a WHERE a.task_id = t.task_id) > 1
		AND EXISTS (SELECT 1 FROM task_attempts a WHERE a.task_id = t.task_id AND a.error_code = 'content_rejected' AND a.attempt_no = 1)`,
		res.Tasks, provider.CodeContentRejected).Scan(&movedAfterRefusal))
	require.Zero(t, movedAfterRefusal, "a content refusal is never sent to another provider")
}

// TestReplicateDownFailsOverToRunway: every Replicate request answered 503
// opens its circuit; the attempts it refused are abandoned for new ones at
// Runway, and every task still ends with one remote job.
func TestReplicateDownFailsOverToRunway(t *testing.T) {
	realServices(t)
	t.Setenv("ROCKETMQ_ENDPOINT", "")
	o := faultyProvider(t)
	o.review = false
	o.sim = providersimDown(o.sim)
	o.breakerFailures = 2
	o.runwaySim.CacheDir = o.sim.CacheDir
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	env, err := start(ctx, o)
	require.NoError(t, err)
	defer env.close()
	res, err := drive.Run(ctx, drive.Params{APIURL: env.apiURL, Key: env.devKey, N: 10, Models: env.models, Timeout: 4 * time.Minute})
	if err != nil {
		explainStuck(t, env)
	}
	require.NoError(t, err)
	facts := env.facts()
	facts.Failed = drive.FailedUnder(env.reviewSim, env.sim, env.runwaySim)
	rep, err := drive.Check(ctx, facts, res)
	require.NoError(t, err)
	t.Logf("%v; failovers %d, remote jobs %d", rep.ByStatus, rep.Failovers, rep.RemoteJobs)
	require.Empty(t, rep.Violations)
	require.Equal(t, 10, rep.ByStatus["SUCCEEDED"])
	require.Positive(t, rep.Failovers, "the attempts Replicate refused moved to Runway")
	require.Equal(t, 10, rep.RemoteJobs, "one remote job per task, all at Runway")
	require.Zero(t, env.sim.Stats().JobsCreated)
}

// providersimDown is o answering every request 503.
func providersimDown(o providersim.Options) providersim.Options {
	o.Rate5xx, o.Rate429, o.RateDrop = 1, 0, 0
	return o
}
