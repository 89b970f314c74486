package drive

import (
	"context"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/aivedio/pipeline/shared/attempt"
	"github.com/aivedio/pipeline/shared/blob"
	"github.com/aivedio/pipeline/shared/task"
)

// Facts are where Check reads the truth.
type Facts struct {
	Pool *pgxpool.Pool
	Blob *blob.Store
	// JobsByKey is the simulator's count of remote jobs per idempotency key.
	JobsByKey map[string]int
	// JobsByPrompt, when set, is the remote jobs per prompt across every
	// provider's simulator: a provider need not carry any key of ours, and
	// each prompt of a run is one task's.
	JobsByPrompt map[string]int
	// SettleWait bounds the wait for settlements still in flight.
	SettleWait time.Duration
	// Review: content review was on for the run, so every SUCCEEDED task
	// must have been approved.
	Review bool
	// StreamUnseen, when set, says why the run's event streams cannot be
	// checked (the process that served them was killed): Check skips the
	// stream check and reports the reason instead of comparing the
	// timeline with itself.
	StreamUnseen string
	// Attention are the error codes a task may end NEEDS_ATTENTION with in
	// this run (reconcile.submit_unknown where a provider without a lookup
	// drops answers); any other is a violation.
	Attention []string
	// Failed are the error codes a task may end FAILED with in this run,
	// given its faults ([FailedUnder]); any other is a violation, and so is
	// any FAILED task when it is empty.
	Failed []string
}

// Report sums a run up.
type Report struct {
	ByStatus      map[string]int
	Attempts      int
	MaxJobsPerKey int
	// Failovers counts attempts left for another provider (ABANDONED);
	// RemoteJobs and MaxJobsPerTask count the jobs the providers started,
	// from Facts.JobsByPrompt.
	Failovers      int
	RemoteJobs     int
	MaxJobsPerTask int
	CreditsCharged int64
	Violations     []string
	// StreamSkipped is Facts.StreamUnseen: the stream check did not run.
	StreamSkipped string
}

// Check verifies the invariants of a finished run:
//
//   - every task is terminal, in a status Check knows, NEEDS_ATTENTION
//     only with a code of Facts.Attention and FAILED only with one of
//     Facts.Failed;
//   - a SUCCEEDED task has its video, proxy, thumbnail and (with audio)
//     waveform in object storage with the recorded size and checksum, and
//     exactly one capture in credit_ledger;
//   - a FAILED or CANCELED task has its reservation released and no capture,
//     except a FAILED review.content_rejected one: captured once, its review
//     REJECTED, none of its assets served (docs/journey.md, "Content review");
//   - with review on, a SUCCEEDED task's review is APPROVED;
//   - the provider saw at most one remote job per attempt key, and (with
//     Facts.JobsByPrompt) every provider together at most one per task;
//   - the event stream delivered every state change of every task, in
//     order (repeats allowed: clients drop them by version).
func Check(ctx context.Context, f Facts, res Result) (Report, error) {
	rep := Report{ByStatus: map[string]int{}, StreamSkipped: f.StreamUnseen}
	violate := func(format string, args ...any) {
		rep.Violations = append(rep.Violations, fmt.Sprintf(format, args...))
	}
	if f.SettleWait <= 0 {
		f.SettleWait = 30 * time.Second
	}
	if err := waitSettled(ctx, f.Pool, res.Tasks, f.SettleWait); err != nil {
		violate("%v", err)
	}
	for _, id := range res.Tasks {
		status, ok := res.Final[id]
		if !ok {
			violate("task %s never reached a terminal state", id)
			continue
		}
		rep.ByStatus[status]++
		if err := checkTask(ctx, f, id, status, res.Stream[id], violate); err != nil {
			return rep, err
		}
		attempts, err := attempt.List(ctx, f.Pool, id)
		if err != nil {
			return rep, err
		}
		rep.Attempts += len(attempts)
		if f.JobsByPrompt != nil {
			n := f.JobsByPrompt[res.Prompts[id]]
			rep.RemoteJobs += n
			rep.MaxJobsPerTask = max(rep.MaxJobsPerTask, n)
			if n > 1 {
				violate("task %s: the providers started %d remote jobs for it", id, n)
			}
		}
		for _, a := range attempts {
			if a.Status == attempt.Abandoned {
				rep.Failovers++
			}
			n := f.JobsByKey[a.IdempotencyKey]
			rep.MaxJobsPerKey = max(rep.MaxJobsPerKey, n)
			if n > 1 {
				violate("attempt key %s started %d remote jobs", a.IdempotencyKey, n)
			}
		}
	}
	err := f.Pool.QueryRow(ctx, `SELECT coalesce(-sum(l.amount), 0) FROM credit_ledger l
		JOIN credit_reservations r ON l.business_id = r.reservation_id::text AND l.ledger_business_type = 'CAPTURE'
		WHERE r.task_id = ANY($1)`, res.Tasks).Scan(&rep.CreditsCharged)
	return rep, err
}

func checkTask(ctx context.Context, f Facts, id uuid.UUID, status string, stream []int64, violate func(string, ...any)) error {
	var reservation string
	var captures int
	err := f.Pool.QueryRow(ctx, `SELECT r.status, (SELECT count(*) FROM credit_ledger l
		WHERE l.ledger_business_type = 'CAPTURE' AND l.business_id = r.reservation_id::text)
		FROM credit_reservations r WHERE r.task_id = $1`, id).Scan(&reservation, &captures)
	if err != nil {
		return fmt.Errorf("read reservation of %s: %w", id, err)
	}
	var errorCode, review string
	if err := f.Pool.QueryRow(ctx, `SELECT coalesce(t.error_code, ''), coalesce((SELECT r.status FROM task_reviews r WHERE r.task_id = t.task_id), '')
		FROM generation_tasks t WHERE t.task_id = $1`, id).Scan(&errorCode, &review); err != nil {
		return fmt.Errorf("read review of %s: %w", id, err)
	}
	if status == "FAILED" && !slices.Contains(f.Failed, errorCode) {
		violate("task %s FAILED %q, which this run's faults do not explain (allowed: %v)", id, errorCode, f.Failed)
	}
	if status == "FAILED" && errorCode == task.ErrContentRejected {
		status = "REJECTED"
	}
	switch status {
	case "REJECTED":
		var served int
		if err := f.Pool.QueryRow(ctx, `SELECT count(*) FROM assets WHERE task_id = $1 AND status = 'READY'`, id).Scan(&served); err != nil {
			return err
		}
		if reservation != "CAPTURED" || captures != 1 || review != "REJECTED" || served != 0 {
			violate("task %s FAILED review.content_rejected: reservation %s with %d captures, review %q, %d assets served; want CAPTURED once, REJECTED, none served",
				id, reservation, captures, review, served)
		}
	case "SUCCEEDED", "CANCELED_WITH_OUTPUT":
		if f.Review && review != "APPROVED" {
			violate("task %s %s with content review on: review %q, want APPROVED", id, status, review)
		}
		if reservation != "CAPTURED" || captures != 1 {
			violate("task %s %s: reservation %s with %d captures, want CAPTURED with exactly 1", id, status, reservation, captures)
		}
	case "FAILED", "CANCELED":
		if reservation != "RELEASED" || captures != 0 {
			violate("task %s %s: reservation %s with %d captures, want RELEASED with none", id, status, reservation, captures)
		}
	case "NEEDS_ATTENTION":
		if !slices.Contains(f.Attention, errorCode) {
			violate("task %s NEEDS_ATTENTION %q, which this run's faults do not explain (allowed: %v)", id, errorCode, f.Attention)
		}
		if reservation != "HELD" {
			violate("task %s NEEDS_ATTENTION: reservation %s, want HELD until a person decides", id, reservation)
		}
	default:
		violate("task %s ended %s, a status the check does not know", id, status)
	}
	if status == "SUCCEEDED" {
		if err := checkAssets(ctx, f, id, violate); err != nil {
			return err
		}
	}
	if f.StreamUnseen != "" {
		return nil
	}
	var versions []int64
	rows, err := f.Pool.Query(ctx, `SELECT version FROM task_events WHERE task_id = $1 ORDER BY version`, id)
	if err != nil {
		return err
	}
	if versions, err = pgx.CollectRows(rows, pgx.RowTo[int64]); err != nil {
		return err
	}
	seen := slices.Compact(slices.Clone(stream))
	if !slices.IsSorted(seen) {
		violate("task %s: event stream out of order: %v", id, stream)
	} else if !slices.Equal(seen, versions) {
		violate("task %s: event stream delivered versions %v, the timeline has %v", id, stream, versions)
	}
	return nil
}

func checkAssets(ctx context.Context, f Facts, id uuid.UUID, violate func(string, ...any)) error {
	rows, err := f.Pool.Query(ctx, `SELECT kind, object_key, checksum_sha256, size_bytes,
		(SELECT audio_codec IS NOT NULL FROM assets s WHERE s.task_id = $1 AND s.kind = 'SOURCE')
		FROM assets WHERE task_id = $1`, id)
	if err != nil {
		return err
	}
	type asset struct {
		kind, key string
		sum       []byte
		size      int64
		audio     *bool
	}
	assets, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (asset, error) {
		var a asset
		err := r.Scan(&a.kind, &a.key, &a.sum, &a.size, &a.audio)
		return a, err
	})
	if err != nil {
		return err
	}
	want := []string{"PROXY", "SOURCE", "THUMBNAIL"}
	if len(assets) > 0 && assets[0].audio != nil && *assets[0].audio {
		want = append(want, "WAVEFORM")
	}
	// An optional derivative ffmpeg could not make may be missing, flagged.
	var missing []string
	if err := f.Pool.QueryRow(ctx, `SELECT missing_derivatives FROM generation_tasks WHERE task_id = $1`, id).Scan(&missing); err != nil {
		return err
	}
	want = slices.DeleteFunc(want, func(k string) bool { return slices.Contains(missing, k) })
	var kinds []string
	for _, a := range assets {
		kinds = append(kinds, a.kind)
		obj, err := f.Blob.Stat(ctx, a.key)
		if err != nil {
			violate("task %s: %s object %s: %v", id, a.kind, a.key, err)
			continue
		}
		if obj.SHA256 != hex.EncodeToString(a.sum) || obj.Size != a.size {
			violate("task %s: %s object holds %d bytes sha256 %s, the asset records %d bytes sha256 %x", id, a.kind, obj.Size, obj.SHA256, a.size, a.sum)
		}
	}
	slices.Sort(kinds)
	slices.Sort(want)
	if !slices.Equal(kinds, want) {
		violate("task %s SUCCEEDED with assets [%s], want [%s]", id, strings.Join(kinds, " "), strings.Join(want, " "))
	}
	return nil
}

// waitSettled waits until no terminal task (other than NEEDS_ATTENTION)
// still holds its reservation: settle runs after the final transition.
func waitSettled(ctx context.Context, pool *pgxpool.Pool, tasks []uuid.UUID, wait time.Duration) error {
	deadline := time.Now().Add(wait)
	for {
		var held int
		err := pool.QueryRow(ctx, `SELECT count(*) FROM credit_reservations r JOIN generation_tasks t USING (task_id)
			WHERE r.task_id = ANY($1) AND r.status = 'HELD'
			AND t.status IN ('SUCCEEDED', 'FAILED', 'CANCELED', 'CANCELED_WITH_OUTPUT')`, tasks).Scan(&held)
		if err != nil {
			return err
		}
		if held == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d terminal tasks still hold their reservation %s after the end", held, wait)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}
