//go:build !race

package kernelbench_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/aivedio/pipeline/shared/catalog"
	"github.com/aivedio/pipeline/shared/dbtest"
	"github.com/aivedio/pipeline/shared/envelope"
	"github.com/aivedio/pipeline/shared/inbox"
	"github.com/aivedio/pipeline/shared/outbox"
)

// tasksPerWorker is how many task rows each goroutine of
// BenchmarkPostgresOnly moves in turn; no two goroutines share one.
const tasksPerWorker = 4

// BenchmarkPostgresOnly is PostgreSQL's ceiling for the stage transaction
// on this machine (docs/design.md §9): inbox.Do with a versioned UPDATE of a task
// row and one outbox.Write, durably committed, from as many goroutines as
// the pool has connections. One b.Loop iteration is 2,000 transactions
// spread over the goroutines; tx/s is the figure, and the best pool size is
// the ceiling.
func BenchmarkPostgresOnly(b *testing.B) {
	for _, conns := range []int{4, 8, 16} {
		b.Run(fmt.Sprintf("conns=%d", conns), func(b *testing.B) { benchStage(b, conns) })
	}
}

func benchStage(b *testing.B, conns int) {
	base := dbtest.TestSchema(b)
	if _, err := base.Exec(b.Context(), `CREATE TABLE kb_tasks (task_id uuid PRIMARY KEY, version int NOT NULL)`); err != nil {
		b.Fatal(err)
	}
	pool := newPool(b, base, int32(conns))
	template, err := envelope.New(envelope.NewParams{
		EventType: catalog.EventFetchRequested, Producer: "kernelbench",
		AggregateType: "generation_task", AggregateID: uuid.NewString(), TenantID: uuid.NewString(),
		Payload: map[string]any{},
	})
	if err != nil {
		b.Fatal(err)
	}
	workers := make([]*stageWorker, conns)
	for i := range workers {
		w := &stageWorker{pool: pool, template: template}
		for range tasksPerWorker {
			t := &stageTask{id: uuid.NewString(), version: 1}
			if _, err := pool.Exec(b.Context(), `INSERT INTO kb_tasks VALUES ($1, $2)`, t.id, t.version); err != nil {
				b.Fatal(err)
			}
			w.tasks = append(w.tasks, t)
		}
		workers[i] = w
	}
	run := func(n int) {
		var wg sync.WaitGroup
		for i, w := range workers {
			wg.Go(func() {
				for range n/conns + btoi(i < n%conns) {
					if err := w.step(b.Context()); err != nil {
						b.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
		if b.Failed() {
			b.FailNow()
		}
	}
	run(warmUp)
	cpu := sampleCPU()
	b.ReportAllocs()
	for b.Loop() {
		run(kernelRound)
	}
	b.ReportMetric(float64(b.N*kernelRound)/b.Elapsed().Seconds(), "tx/s")
	logCPU(b, cpu, b.N*kernelRound)
}

type stageTask struct {
	id      string
	version int
}

// stageWorker runs stage transactions one after another on its own tasks.
type stageWorker struct {
	pool     *pgxpool.Pool
	template envelope.Envelope
	tasks    []*stageTask
	next     int
}

// step handles one inbound event for the next task: the stage transaction.
func (w *stageWorker) step(ctx context.Context) error {
	task := w.tasks[w.next%len(w.tasks)]
	w.next++
	in := w.template
	in.EventID = uuid.Must(uuid.NewV7()).String()
	in.EventType = catalog.EventCallbackReceived
	in.AggregateID = task.id
	in.Payload = fmt.Appendf(nil, `{"task_id":%q,"version":%d}`, task.id, task.version)
	out, err := inbox.Do(ctx, w.pool, "kernelbench", in, func(ctx context.Context, tx pgx.Tx) (inbox.Result, error) {
		tag, err := tx.Exec(ctx, `UPDATE kb_tasks SET version = version + 1 WHERE task_id = $1 AND version = $2`, task.id, task.version)
		if err != nil {
			return "", err
		}
		if tag.RowsAffected() == 0 {
			return inbox.StaleNoop, nil
		}
		next := w.template
		next.EventID = uuid.Must(uuid.NewV7()).String()
		next.AggregateID, next.CausationID, next.Payload = task.id, in.EventID, in.Payload
		return inbox.Applied, outbox.Write(ctx, tx, outbox.Event{Envelope: next, Topic: catalog.AssetFetch})
	})
	if err != nil {
		return err
	}
	if out.Duplicate || out.Result != inbox.Applied {
		return fmt.Errorf("stage transaction of task %s: %+v, want applied", task.id, out)
	}
	task.version++
	return nil
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
