package inbox

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/aivedio/pipeline/shared/envelope"
)

// BatchFunc applies one event of a batch inside tx, the batch's transaction,
// under a savepoint of its own. The rules of [Func] apply.
type BatchFunc func(ctx context.Context, tx pgx.Tx, ev envelope.Envelope) (Result, error)

// MaxBatch bounds the events of one [DoBatch]. Every event that writes
// runs in a subtransaction of its own, and a transaction with more than 64
// of them overflows PostgreSQL's per-backend subtransaction cache, which
// slows snapshots in every session until it ends.
const MaxBatch = 64

// DoBatch processes evs for consumer in one transaction, in order, each as
// [Do] would: deduplicated, and run under a savepoint so that an event whose
// function fails (or that is invalid, or a payload mismatch) rolls back only
// its own work. It takes at most [MaxBatch] events.
//
// When the returned error is non-nil, nothing committed and every event must
// be delivered again; it is a database failure of the batch itself (begin,
// commit, an inbox statement) or a serialization failure or deadlock that
// outlasted [MaxAttempts] tries of the whole batch, which runs every function
// again. Otherwise the outcomes and errors are parallel to evs: an event with
// a nil error is done (acknowledge it) and its outcome says how; an event
// with an error left nothing behind, its function's error is returned
// unchanged, and it is handled like a failure of [Do].
func DoBatch(ctx context.Context, db TxBeginner, consumer string, evs []envelope.Envelope, fn BatchFunc) ([]Outcome, []error, error) {
	switch {
	case consumer == "":
		return nil, nil, errNoConsumer
	case len(evs) > MaxBatch:
		return nil, nil, fmt.Errorf("inbox: a batch takes at most %d events, got %d", MaxBatch, len(evs))
	}
	entries := make([]entry, len(evs))
	invalid := make([]error, len(evs))
	for i, ev := range evs {
		entries[i], invalid[i] = newEntry(consumer, ev)
	}
	type result struct {
		outs []Outcome
		errs []error
	}
	r, err := retry(ctx, func() (result, error) {
		outs, errs := make([]Outcome, len(evs)), append([]error(nil), invalid...)
		err := doBatch(ctx, db, consumer, entries, evs, fn, outs, errs)
		return result{outs, errs}, err
	})
	if err != nil {
		return nil, nil, err
	}
	for i, out := range r.outs {
		if r.errs[i] == nil {
			observe(consumer, evs[i], out)
		}
	}
	return r.outs, r.errs, nil
}

// The savepoint each event of a batch runs under. Each event releases the
// previous one in the same round trip as its own claim, so at most one is
// open and a rollback to it undoes exactly the current event's work.
const (
	savepointSQL         = "SAVEPOINT inbox_batch_event"
	releaseSavepointSQL  = "RELEASE SAVEPOINT inbox_batch_event"
	rollbackSavepointSQL = "ROLLBACK TO SAVEPOINT inbox_batch_event"
)

// doBatch is one attempt of [DoBatch]; it fills outs and errs.
func doBatch(ctx context.Context, db TxBeginner, consumer string, entries []entry, evs []envelope.Envelope, fn BatchFunc, outs []Outcome, errs []error) error {
	if len(evs) == 0 {
		return nil
	}
	tx, err := db.Begin(ctx)
	if err != nil {
		return fmt.Errorf("begin inbox batch transaction: %w", err)
	}
	committed := false
	defer func() {
		if !committed {
			rollback(ctx, tx)
		}
	}()

	savepoint := []string{savepointSQL}
	for i, e := range entries {
		if errs[i] != nil {
			continue
		}
		outs[i], errs[i], err = e.doSavepoint(ctx, tx, savepoint, evs[i], fn)
		if err != nil {
			return err
		}
		savepoint = []string{releaseSavepointSQL, savepointSQL}
	}
	committed = true
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("commit inbox batch of %d events for %s: %w", len(evs), consumer, err)
	}
	return nil
}

// doSavepoint handles one event of a batch under a savepoint that the
// statements in savepoint open. evErr is the event's own failure, after which
// its work has been rolled back; err is a failure of the whole batch (an
// inbox statement, the savepoint, a conflict).
func (e entry) doSavepoint(ctx context.Context, tx pgx.Tx, savepoint []string, ev envelope.Envelope, fn BatchFunc) (out Outcome, evErr, err error) {
	out, done, err := e.claim(ctx, tx, savepoint...)
	switch {
	case done: // a duplicate or a payload mismatch: nothing to undo
		return out, err, nil
	case err != nil:
		return Outcome{}, nil, err
	}
	result, err := fn(ctx, tx, ev)
	if err == nil {
		err = e.record(ctx, tx, result)
	}
	if err == nil {
		return Outcome{Result: result}, nil, nil
	}
	if _, ok := conflict(err); ok {
		return Outcome{}, nil, err // retry the whole batch, as Do retries its transaction
	}
	if _, rerr := tx.Exec(ctx, rollbackSavepointSQL); rerr != nil {
		return Outcome{}, nil, fmt.Errorf("roll back event %s of an inbox batch: %w", e.eventID, rerr)
	}
	return Outcome{}, err, nil
}
