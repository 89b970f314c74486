package reconcile_test

import (
	"crypto/sha256"
	"sync"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/functions/reconcile"
	"github.com/aivedio/pipeline/functions/stage"
	"github.com/aivedio/pipeline/shared/billing"
	"github.com/aivedio/pipeline/shared/catalog"
	"github.com/aivedio/pipeline/shared/config"
	"github.com/aivedio/pipeline/shared/dbtest"
	"github.com/aivedio/pipeline/shared/servicetest"
	"github.com/aivedio/pipeline/shared/slots"
	"github.com/aivedio/pipeline/shared/task"
	"github.com/aivedio/pipeline/shared/tenant"
)

var scanJourney = config.Journey{PollFirst: time.Second, PollMax: time.Minute, MaxWait: time.Hour, RetryBase: time.Second,
	RetryMax: time.Minute, MaxRetries: 5, ReconcileAfter: 20 * time.Second, ReconcileRounds: 3,
	SlotsPerTenant: 1, SlotsPerModel: 1, SlotsPerProv: 1, SlotLease: time.Hour,
	ScanGrace: time.Minute, StuckAfter: 10 * time.Minute, OutboxStale: 5 * time.Minute, UploadExpiry: time.Hour}

type scanBundle struct {
	pool     *pgxpool.Pool
	tenantID uuid.UUID
	scanner  *reconcile.Scanner
}

func scanSetup(t *testing.T) *scanBundle {
	t.Helper()
	b := &scanBundle{pool: dbtest.TestSchema(t)}
	require.NoError(t, pgx.BeginFunc(t.Context(), b.pool, func(tx pgx.Tx) error {
		c, err := tenant.Create(t.Context(), tx, tenant.NewTenant{Name: "acme", Credits: 1000}, tenant.RoleTenant)
		b.tenantID = c.TenantID
		return err
	}))
	b.scanner = reconcile.NewScanner(reconcile.Params{Pool: b.pool, Journey: scanJourney, Timeout: 10 * time.Second})
	return b
}

// stuckTask creates a task with a reservation and forces it into status,
// last changed age ago: the state a lost event leaves behind.
func (b *scanBundle) stuckTask(t *testing.T, status task.Status, age time.Duration) task.Task {
	t.Helper()
	var created task.Task
	require.NoError(t, pgx.BeginFunc(t.Context(), b.pool, func(tx pgx.Tx) error {
		hash := sha256.Sum256([]byte("p"))
		var err error
		created, _, err = task.Create(t.Context(), tx, task.Origin{Producer: "api"}, task.New{TenantID: b.tenantID, IdempotencyKey: uuid.NewString(),
			RequestHash: hash[:], Model: "m", Prompt: "p", DurationSeconds: 2, Resolution: "640x360"})
		if err != nil {
			return err
		}
		return billing.Reserve(t.Context(), tx, b.tenantID, created.ID, 20)
	}))
	_, err := b.pool.Exec(t.Context(), `UPDATE generation_tasks SET status = $2, updated_at = now() - $3 * interval '1 second',
		next_retry_at = now() - $3 * interval '1 second', next_poll_at = now() - $3 * interval '1 second' WHERE task_id = $1`,
		created.ID, status, age.Seconds())
	require.NoError(t, err)
	// Only the scanner's own events count from here.
	_, err = b.pool.Exec(t.Context(), `DELETE FROM outbox_events`)
	require.NoError(t, err)
	got, err := task.Get(t.Context(), b.pool, created.ID)
	require.NoError(t, err)
	return got
}

func (b *scanBundle) emitted(t *testing.T) []string {
	t.Helper()
	rows, err := b.pool.Query(t.Context(), `SELECT event_type || coalesce(':' || nullif(tag, event_type), '') FROM outbox_events
		WHERE event_type <> $1 ORDER BY created_at`, catalog.EventTaskStateChanged)
	require.NoError(t, err)
	got, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return got
}

func TestScanResubmitsAQueuedTaskOnceAndRecordsIt(t *testing.T) {
	t.Parallel()
	b := scanSetup(t)
	stuck := b.stuckTask(t, task.Queued, 5*time.Minute)
	fresh := b.stuckTask(t, task.Queued, 0)

	rep, err := b.scanner.Scan(t.Context())
	require.NoError(t, err)
	require.Equal(t, 1, rep.Rescued[task.Queued])
	require.Equal(t, []string{catalog.EventSubmitRequested}, b.emitted(t))

	got, err := task.Get(t.Context(), b.pool, stuck.ID)
	require.NoError(t, err)
	require.Equal(t, task.Queued, got.Status)
	require.Equal(t, stuck.Version+1, got.Version, "the rescue is on the timeline")
	var reason string
	require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT reason FROM task_events WHERE task_id = $1 AND version = $2`, stuck.ID, got.Version).Scan(&reason))
	require.Contains(t, reason, "reconcile")

	// The rescue restarted the task's clock: the next scan leaves it alone.
	rep, err = b.scanner.Scan(t.Context())
	require.NoError(t, err)
	require.Zero(t, rep.Rescued[task.Queued])
	fresh2, err := task.Get(t.Context(), b.pool, fresh.ID)
	require.NoError(t, err)
	require.Equal(t, fresh.Version, fresh2.Version)
}

func TestScanReemitsTheLostPollOfTheLiveChain(t *testing.T) {
	t.Parallel()
	b := scanSetup(t)
	stuck := b.stuckTask(t, task.ProviderRunning, 5*time.Minute)
	_, err := b.pool.Exec(t.Context(), `UPDATE generation_tasks SET provider = 'sim', provider_job_id = 'job-1' WHERE task_id = $1`, stuck.ID)
	require.NoError(t, err)
	_, err = b.pool.Exec(t.Context(), `INSERT INTO task_attempts (task_id, attempt_no, provider, model, provider_idempotency_key, client_request_id, provider_job_id, status)
		VALUES ($1::uuid, 1, 'sim', 'm', $1::uuid::text || '-1', 'crid', 'job-1', 'ACCEPTED')`, stuck.ID)
	require.NoError(t, err)

	rep, err := b.scanner.Scan(t.Context())
	require.NoError(t, err)
	require.Equal(t, 1, rep.Rescued[task.ProviderRunning])
	var payload task.PollDue
	require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT payload FROM outbox_events WHERE event_type = $1`, catalog.EventPollDue).Scan(&payload))
	require.True(t, payload.PollAt.Equal(*stuck.NextPollAt), "the re-emitted poll belongs to the live chain")
}

func TestScanReemitsOnlyMissingDerivatives(t *testing.T) {
	t.Parallel()
	b := scanSetup(t)
	stuck := b.stuckTask(t, task.MediaProcessing, time.Hour)
	source := uuid.New()
	_, err := b.pool.Exec(t.Context(), `INSERT INTO assets (asset_id, tenant_id, task_id, kind, object_key, checksum_sha256, size_bytes, content_type, probe, audio_codec)
		VALUES ($1, $2, $3::uuid, 'SOURCE', $3::uuid::text || '/out', $4, 1, 'video/mp4', '{}', 'aac')`, source, b.tenantID, stuck.ID, make([]byte, 32))
	require.NoError(t, err)
	_, err = b.pool.Exec(t.Context(), `INSERT INTO assets (tenant_id, task_id, source_asset_id, kind, object_key, checksum_sha256, size_bytes, content_type)
		VALUES ($1, $2::uuid, $3, 'PROXY', $2::uuid::text || '/proxy', $4, 1, 'video/mp4')`, b.tenantID, stuck.ID, source, make([]byte, 32))
	require.NoError(t, err)

	_, err = b.scanner.Scan(t.Context())
	require.NoError(t, err)
	require.ElementsMatch(t, []string{
		catalog.EventPostprocess + ":" + catalog.TagThumbnail,
		catalog.EventPostprocess + ":" + catalog.TagWaveform,
	}, b.emitted(t))
}

func TestScanHandsARepeatedlyLostLookupToAPerson(t *testing.T) {
	t.Parallel()
	b := scanSetup(t)
	stuck := b.stuckTask(t, task.Reconciling, time.Hour)
	b.lostSubmit(t, stuck.ID)
	for i := range 4 {
		b.age(t, stuck.ID)
		rep, err := b.scanner.Scan(t.Context())
		require.NoError(t, err)
		if i < 3 {
			require.Equal(t, 1, rep.Rescued[task.Reconciling], "scan %d", i)
		} else {
			require.Equal(t, 1, rep.NeedsAttention)
		}
	}
	got, err := task.Get(t.Context(), b.pool, stuck.ID)
	require.NoError(t, err)
	require.Equal(t, task.NeedsAttention, got.Status)
	require.Equal(t, "reconcile.submit_unknown", got.ErrorCode)
}

// TestScanKeepsRestartingALookupChainThatRuns: a lookup chain the scanner
// restarts, whose lookups then run (each touches the task) without finding
// out yet, is not a chain without progress: however many times the
// scanner has to restart it (its consumer deaf, its function paused), the
// task is not handed to a person for it.
func TestScanKeepsRestartingALookupChainThatRuns(t *testing.T) {
	t.Parallel()
	b := scanSetup(t)
	stuck := b.stuckTask(t, task.Reconciling, time.Hour)
	b.lostSubmit(t, stuck.ID)
	for i := range 2 * 3 {
		b.age(t, stuck.ID)
		rep, err := b.scanner.Scan(t.Context())
		require.NoError(t, err)
		require.Equal(t, 1, rep.Rescued[task.Reconciling], "scan %d", i)
		require.Zero(t, rep.NeedsAttention, "scan %d: the restarted chain ran", i)
		// The restarted chain's lookup did not find out yet: it touched
		// the task, as the lookup stage does.
		require.NoError(t, pgx.BeginFunc(t.Context(), b.pool, func(tx pgx.Tx) error {
			cur, err := task.Lock(t.Context(), tx, stuck.ID)
			if err != nil {
				return err
			}
			_, err = task.Touch(t.Context(), tx, task.Origin{Producer: reconcile.Name}, cur, "lookup 1 of 10 did not find out (unavailable); looking again in 2s")
			return err
		}))
	}
	require.Equal(t, task.Reconciling, b.reloadTask(t, stuck.ID).Status)
}

// lostSubmit gives task id the attempt of a submit whose answer was lost.
func (b *scanBundle) lostSubmit(t *testing.T, id uuid.UUID) {
	t.Helper()
	_, err := b.pool.Exec(t.Context(), `INSERT INTO task_attempts (task_id, attempt_no, provider, model, provider_idempotency_key, client_request_id, status)
		VALUES ($1::uuid, 1, 'sim', 'm', $1::uuid::text || '-1', 'crid', 'SUBMIT_UNKNOWN')`, id)
	require.NoError(t, err)
}

// age makes a task look an hour old again and its events published an
// hour ago, as they would be an hour after the last scan re-emitted its
// step, and has every stage the steps of that scan go to take them and
// change nothing (a STALE_NOOP inbox row): the task is stuck, not the
// broker.
func (b *scanBundle) age(t *testing.T, id uuid.UUID) {
	t.Helper()
	rows, err := b.pool.Query(t.Context(), `SELECT event_id FROM outbox_events WHERE producer = $1 AND published_at IS NULL`, reconcile.Name)
	require.NoError(t, err)
	last, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	require.NoError(t, err)
	b.ageUntaken(t, id)
	var groups []string
	for _, g := range catalog.Groups() {
		groups = append(groups, g.Name)
	}
	_, err = b.pool.Exec(t.Context(), `INSERT INTO inbox_dedup (consumer_name, event_id, result_code, payload_hash)
		SELECT g, e, 'STALE_NOOP', $3 FROM unnest($1::uuid[]) AS e, unnest($2::text[]) AS g`, last, groups, make([]byte, 32))
	require.NoError(t, err)
}

// ageUntaken is age with the re-emitted steps published and received by
// nobody: the broker lost them, or the stage's consumers are deaf.
func (b *scanBundle) ageUntaken(t *testing.T, id uuid.UUID) {
	t.Helper()
	_, err := b.pool.Exec(t.Context(), `UPDATE generation_tasks SET updated_at = now() - interval '1 hour',
		next_retry_at = now() - interval '1 hour' WHERE task_id = $1`, id)
	require.NoError(t, err)
	_, err = b.pool.Exec(t.Context(), `UPDATE outbox_events SET published_at = now() - interval '1 hour' WHERE published_at IS NULL`)
	require.NoError(t, err)
}

// TestScanNeverGivesUpOnReemissionsNobodyTook: a broker outage or deaf
// consumers lose every step the scanner re-emits; however many rounds
// that lasts, no task is handed to a person for it. Once the stage takes
// the re-emissions and the task still does not move, maxRescues of them
// hand it over.
func TestScanNeverGivesUpOnReemissionsNobodyTook(t *testing.T) {
	t.Parallel()
	for _, status := range []task.Status{task.Queued, task.Submitting, task.Fetching, task.Reconciling} {
		t.Run(string(status), func(t *testing.T) {
			t.Parallel()
			b := scanSetup(t)
			stuck := b.stuckTask(t, status, time.Hour)
			code, reason := "reconcile.no_progress", "each reached its stage"
			if status == task.Reconciling { // a lost submit whose lookups keep getting lost
				b.lostSubmit(t, stuck.ID)
				code, reason = "reconcile.submit_unknown", "a person decides"
			}
			const outageRounds = 8
			for i := range outageRounds {
				b.ageUntaken(t, stuck.ID)
				rep, err := b.scanner.Scan(t.Context())
				require.NoError(t, err)
				require.Equal(t, 1, rep.Rescued[status], "outage round %d: re-emitted again", i)
				require.Zero(t, rep.NeedsAttention, "outage round %d: nothing reached the stage", i)
			}
			for i := range 4 { // the first re-emission the stage took is the last of the outage
				b.age(t, stuck.ID)
				rep, err := b.scanner.Scan(t.Context())
				require.NoError(t, err)
				if i < 2 {
					require.Equal(t, 1, rep.Rescued[status], "taken round %d", i)
					continue
				}
				require.Equal(t, 1, rep.NeedsAttention, "taken round %d: three reached the stage", i)
				break
			}
			got := b.reloadTask(t, stuck.ID)
			require.Equal(t, task.NeedsAttention, got.Status)
			require.Equal(t, code, got.ErrorCode)
			require.Contains(t, got.ErrorMessage, reason)
		})
	}
}

// TestScanHandsATaskThatDoesNotMoveToAPerson: in every state the scanner
// re-emits a step a bounded number of times; a task that still does not
// move (its stage refuses the step every time) ends in NEEDS_ATTENTION
// with a reason, instead of being re-emitted every few minutes for ever.
func TestScanHandsATaskThatDoesNotMoveToAPerson(t *testing.T) {
	t.Parallel()
	for _, status := range []task.Status{task.Queued, task.WaitingRetry, task.Submitting, task.Fetching} {
		t.Run(string(status), func(t *testing.T) {
			t.Parallel()
			b := scanSetup(t)
			stuck := b.stuckTask(t, status, time.Hour)
			for i := range 4 {
				b.age(t, stuck.ID)
				rep, err := b.scanner.Scan(t.Context())
				require.NoError(t, err)
				if i < 3 {
					require.Equal(t, 1, rep.Rescued[status], "scan %d re-emits", i)
				} else {
					require.Equal(t, 1, rep.NeedsAttention, "scan %d gives up", i)
				}
			}
			got, err := task.Get(t.Context(), b.pool, stuck.ID)
			require.NoError(t, err)
			require.Equal(t, task.NeedsAttention, got.Status)
			require.Equal(t, "reconcile.no_progress", got.ErrorCode)
			require.Contains(t, got.ErrorMessage, string(status))
		})
	}
}

// TestScanCountsOnlyRoundsWithoutProgress: a step still in the outbox is
// not re-emitted and not counted (the relay or broker is down, not the
// stage), and a task that moved in between starts counting again.
func TestScanCountsOnlyRoundsWithoutProgress(t *testing.T) {
	t.Parallel()
	b := scanSetup(t)
	stuck := b.stuckTask(t, task.Queued, time.Hour)
	rep, err := b.scanner.Scan(t.Context())
	require.NoError(t, err)
	require.Equal(t, 1, rep.Rescued[task.Queued])
	for range 5 { // the relay is down: the re-emitted submit is not published
		_, err = b.pool.Exec(t.Context(), `UPDATE generation_tasks SET updated_at = now() - interval '1 hour' WHERE task_id = $1`, stuck.ID)
		require.NoError(t, err)
		rep, err = b.scanner.Scan(t.Context())
		require.NoError(t, err)
		require.Zero(t, rep.Rescued[task.Queued]+rep.NeedsAttention, "nothing to add while the last one waits in the outbox")
	}
	b.age(t, stuck.ID)
	rep, err = b.scanner.Scan(t.Context())
	require.NoError(t, err)
	require.Equal(t, 1, rep.Rescued[task.Queued], "second round")

	// A stage moved it (a wait recorded by submit): the count starts again.
	require.NoError(t, pgx.BeginFunc(t.Context(), b.pool, func(tx pgx.Tx) error {
		cur, err := task.Lock(t.Context(), tx, stuck.ID)
		if err != nil {
			return err
		}
		_, err = task.Touch(t.Context(), tx, task.Origin{Producer: "submit"}, cur, "provider 429")
		return err
	}))
	for i := range 3 {
		b.age(t, stuck.ID)
		rep, err = b.scanner.Scan(t.Context())
		require.NoError(t, err)
		require.Equal(t, 1, rep.Rescued[task.Queued], "round %d after progress", i)
	}
	got, err := task.Get(t.Context(), b.pool, stuck.ID)
	require.NoError(t, err)
	require.Equal(t, task.Queued, got.Status)
}

func TestScanSettlesTerminalTasksStillHoldingCredits(t *testing.T) {
	t.Parallel()
	b := scanSetup(t)
	b.stuckTask(t, task.Succeeded, 10*time.Minute)
	b.stuckTask(t, task.Succeeded, 0) // its settle may still be on its way
	rep, err := b.scanner.Scan(t.Context())
	require.NoError(t, err)
	require.Equal(t, 1, rep.Settled)
	require.Equal(t, []string{catalog.EventSettleRequested}, b.emitted(t))
}

func TestScanReportsAStaleOutbox(t *testing.T) {
	t.Parallel()
	b := scanSetup(t)
	b.stuckTask(t, task.Succeeded, 0)
	_, err := b.pool.Exec(t.Context(), `INSERT INTO outbox_events (event_id, event_type, schema_version, producer, topic, tag, aggregate_type, aggregate_id, tenant_id, payload, occurred_at, created_at)
		VALUES (gen_random_uuid(), 'x.y', 1, 'api', 'billing.settle', 'x.y', 'generation_task', 'a', $1, '{}', now(), now() - interval '1 hour')`, b.tenantID)
	require.NoError(t, err)
	rep, err := b.scanner.Scan(t.Context())
	require.NoError(t, err)
	require.Equal(t, 1, rep.StaleOutboxRows)
	require.Greater(t, rep.OldestUnpublished, 50*time.Minute)
}

// TestAPingScans: Knative's PingSource event, which carries no envelope,
// runs the scan through the stage's ordinary entry point.
func TestAPingScans(t *testing.T) {
	t.Parallel()
	b := scanSetup(t)
	stuck := b.stuckTask(t, task.Queued, 5*time.Minute)
	fn := reconcile.New(reconcile.Params{Pool: b.pool, Journey: scanJourney, Timeout: 10 * time.Second})
	ping := event.New()
	ping.SetID(uuid.NewString())
	ping.SetType(reconcile.PingEventType)
	ping.SetSource("/apis/v1/namespaces/aivedio/pingsources/reconcile-sweep")
	require.NoError(t, ping.SetData(event.ApplicationJSON, map[string]string{"sweep": "stalled-tasks"}))
	_, err := fn.Handle(t.Context(), ping)
	require.NoError(t, err)
	got, err := task.Get(t.Context(), b.pool, stuck.ID)
	require.NoError(t, err)
	require.Equal(t, stuck.Version+1, got.Version)
	require.Equal(t, []string{catalog.EventSubmitRequested}, b.emitted(t))
}

// TestScanRetriesMissingDerivativesInTheBackground: a task that finished
// without its thumbnail gets the thumbnail step again, paced, and not once
// its retries are used up.
func TestScanRetriesMissingDerivativesInTheBackground(t *testing.T) {
	t.Parallel()
	b := scanSetup(t)
	done := b.stuckTask(t, task.Succeeded, time.Hour)
	source := uuid.New()
	_, err := b.pool.Exec(t.Context(), `INSERT INTO assets (asset_id, tenant_id, task_id, kind, object_key, checksum_sha256, size_bytes, content_type)
		VALUES ($1, $2, $3::uuid, 'SOURCE', $3::uuid::text || '/out', $4, 1, 'video/mp4')`, source, b.tenantID, done.ID, make([]byte, 32))
	require.NoError(t, err)
	_, err = b.pool.Exec(t.Context(), `UPDATE generation_tasks SET missing_derivatives = '{THUMBNAIL}', updated_at = now() - interval '1 hour' WHERE task_id = $1`, done.ID)
	require.NoError(t, err)
	// Its settlement is done: only the derivative is retried.
	_, err = b.pool.Exec(t.Context(), `UPDATE credit_reservations SET status = 'CAPTURED', settled_at = now() WHERE task_id = $1`, done.ID)
	require.NoError(t, err)

	rep, err := b.scanner.Scan(t.Context())
	require.NoError(t, err)
	require.Equal(t, 1, rep.DerivativesRetried)
	require.Equal(t, []string{catalog.EventPostprocess + ":" + catalog.TagThumbnail}, b.emitted(t))

	rep, err = b.scanner.Scan(t.Context())
	require.NoError(t, err)
	require.Zero(t, rep.DerivativesRetried, "paced: once per RECONCILE_STUCK_AFTER")

	_, err = b.pool.Exec(t.Context(), `INSERT INTO derivative_failures (source_asset_id, kind, failures) VALUES ($1, 'THUMBNAIL', 10)`, source)
	require.NoError(t, err)
	_, err = b.pool.Exec(t.Context(), `UPDATE generation_tasks SET updated_at = now() - interval '1 hour' WHERE task_id = $1`, done.ID)
	require.NoError(t, err)
	rep, err = b.scanner.Scan(t.Context())
	require.NoError(t, err)
	require.Zero(t, rep.DerivativesRetried, "given up after its retries")
}

// TestScanRebuildsSlotsFromTheTasksInFlight: a Redis that lost its slots
// gets back exactly the in-flight tasks; a slot leaked by a task that ended
// is freed.
func TestScanRebuildsSlotsFromTheTasksInFlight(t *testing.T) {
	t.Parallel()
	b := scanSetup(t)
	opts, err := redis.ParseURL(servicetest.Env(t, "Redis", "REDIS_URL"))
	require.NoError(t, err)
	rdb := redis.NewClient(opts)
	t.Cleanup(func() { _ = rdb.Close() })
	limiter := slots.New(rdb, &slots.Opts{KeyPrefix: "test:" + uuid.NewString() + ":"})
	scanner := reconcile.NewScanner(reconcile.Params{Pool: b.pool, Slots: limiter, Journey: scanJourney, Timeout: 10 * time.Second})

	running := b.stuckTask(t, task.ProviderRunning, 0)
	ended := b.stuckTask(t, task.Succeeded, 0)
	_, err = b.pool.Exec(t.Context(), `UPDATE generation_tasks SET provider = 'sim', next_poll_at = now() + interval '1 hour'`)
	require.NoError(t, err)
	// The ended task's slot leaked (its stage died before releasing it).
	leaked := stage.GenerationSlots(ended, "sim", scanJourney)
	leaked.Scopes[0].Limit = 10
	_, err = limiter.Acquire(t.Context(), leaked)
	require.NoError(t, err)
	tenantScope := "tenant:" + b.tenantID.String()

	rep, err := scanner.Scan(t.Context())
	require.NoError(t, err)
	require.Equal(t, 3, rep.SlotScopesRebuilt, "tenant, model and provider")
	n, err := limiter.InUse(t.Context(), tenantScope)
	require.NoError(t, err)
	require.Equal(t, 1, n, "exactly the running task holds the tenant's slot")
	_, err = limiter.Acquire(t.Context(), stage.GenerationSlots(running, "sim", scanJourney))
	require.NoError(t, err, "the running task holds its slot already: acquiring again renews it")
}

// TestScanReemitsALostReview: a task whose derivatives are all stored but
// whose content review lost its REVIEW gets it again, at the attempt its
// chain is at; one whose delayed REVIEW is still on schedule is left alone.
func TestScanReemitsALostReview(t *testing.T) {
	t.Parallel()
	b := scanSetup(t)
	stuck := b.stuckTask(t, task.MediaProcessing, time.Hour)
	source := uuid.New()
	_, err := b.pool.Exec(t.Context(), `INSERT INTO assets (asset_id, tenant_id, task_id, kind, object_key, checksum_sha256, size_bytes, content_type, probe)
		VALUES ($1, $2, $3::uuid, 'SOURCE', $3::uuid::text || '/out', $4, 1, 'video/mp4', '{}')`, source, b.tenantID, stuck.ID, make([]byte, 32))
	require.NoError(t, err)
	for _, kind := range []string{"PROXY", "THUMBNAIL"} {
		_, err = b.pool.Exec(t.Context(), `INSERT INTO assets (tenant_id, task_id, source_asset_id, kind, object_key, checksum_sha256, size_bytes, content_type)
			VALUES ($1, $2::uuid, $3, $4, $2::uuid::text || '/' || $4, $5, 1, 'video/mp4')`, b.tenantID, stuck.ID, source, kind, make([]byte, 32))
		require.NoError(t, err)
	}
	// On schedule: the reviewer was down, the next call is due in a minute.
	_, err = b.pool.Exec(t.Context(), `INSERT INTO task_reviews (task_id, tenant_id, asset_id, status, attempts, waiting_since, next_attempt_at)
		VALUES ($1, $2, $3, 'WAITING', 2, now() - interval '5 minutes', now() + interval '1 minute')`, stuck.ID, b.tenantID, source)
	require.NoError(t, err)
	_, err = b.scanner.Scan(t.Context())
	require.NoError(t, err)
	require.Empty(t, b.emitted(t), "a review waiting on schedule needs no rescue")

	// Overdue by far: its delayed REVIEW was lost.
	_, err = b.pool.Exec(t.Context(), `UPDATE task_reviews SET next_attempt_at = now() - interval '1 hour' WHERE task_id = $1`, stuck.ID)
	require.NoError(t, err)
	_, err = b.scanner.Scan(t.Context())
	require.NoError(t, err)
	require.Equal(t, []string{catalog.EventPostprocess + ":" + catalog.TagReview}, b.emitted(t))
	var p task.Postprocess
	require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT payload FROM outbox_events WHERE event_type = $1 AND tag = $2`,
		catalog.EventPostprocess, catalog.TagReview).Scan(&p))
	require.Equal(t, 2, p.RetryAttempt, "the re-emitted REVIEW belongs to the live chain")
}

// testClock is the scanner's clock: tests move it forward instead of
// sleeping. What the database writes keeps its own time, so every row
// written during a test looks at least as old as the clock has moved.
type testClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *testClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// clocked is a scanner over b's database with journey j and a clock that
// starts now.
func (b *scanBundle) clocked(j config.Journey) (*reconcile.Scanner, *testClock) {
	c := &testClock{now: time.Now()}
	return reconcile.NewScanner(reconcile.Params{Pool: b.pool, Journey: j, Timeout: 10 * time.Second, Now: c.Now}), c
}
