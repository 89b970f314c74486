package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/aivedio/pipeline/shared/attention"
	"github.com/aivedio/pipeline/shared/config"
)

const tasksUsage = `usage: adapter tasks resolve <task-id> (--job <provider job id> | --no-job) --ticket T --operator O [--reason R]
  A task in NEEDS_ATTENTION reconcile.submit_unknown lost its submit's answer at a
  provider that could not say whether it made a job (Runway has no lookup):
  look for the job in the provider's console (created at the time the task's
  error message names), then say what you found.
  --job ID   the provider made job ID for it: the task follows that job (PROVIDER_RUNNING, polled)
  --no-job   the provider made none: the attempt is resubmitted with the same key
  The decision is recorded in task_resolutions with its ticket, operator and reason,
  in the transaction that carries it out (DATABASE_URL; POLL_FIRST_DELAY, GENERATION_MAX_WAIT)`

// runTasks serves `adapter tasks resolve`.
func runTasks(ctx context.Context, args []string) error {
	if len(args) < 2 || args[0] != "resolve" {
		return errors.New(tasksUsage)
	}
	id, err := uuid.Parse(args[1])
	if err != nil {
		return fmt.Errorf("task id %q is not a UUID\n%s", args[1], tasksUsage)
	}
	fs := flag.NewFlagSet("tasks resolve", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // the error returned says what is wrong
	d := attention.Decision{TaskID: id}
	fs.StringVar(&d.JobID, "job", "", "the provider job found for the task")
	fs.BoolVar(&d.NoJob, "no-job", false, "the provider made no job for the task")
	fs.StringVar(&d.Ticket, "ticket", "", "the ticket the decision is made under (required)")
	fs.StringVar(&d.Operator, "operator", "", "who decides (required)")
	fs.StringVar(&d.Reason, "reason", "", "why, in a few words")
	if err := fs.Parse(args[2:]); err != nil {
		return fmt.Errorf("%w\n%s", err, tasksUsage)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q\n%s", fs.Arg(0), tasksUsage)
	}
	if err := d.Validate(); err != nil {
		return fmt.Errorf("%w\n%s", err, tasksUsage)
	}
	var cfg struct {
		DB      config.Migrate
		Journey config.Journey
	}
	if err := config.Load(&cfg.DB); err != nil {
		return err
	}
	if err := config.Load(&cfg.Journey); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, cfg.DB.URL)
	if err != nil {
		return fmt.Errorf("connect to PostgreSQL: %w", err)
	}
	defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
	var r attention.Resolution
	if err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		r, err = attention.Resolve(ctx, tx, cfg.Journey, d)
		return err
	}); err != nil {
		return err
	}
	fmt.Fprintf(os.Stdout, "resolution_id: %s\ntask_id:       %s\nattempt_id:    %s (%s)\nstatus:        %s\n", r.ID, r.Task.ID, r.AttemptID, r.Provider, r.Task.Status)
	return nil
}
