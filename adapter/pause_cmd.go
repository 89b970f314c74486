package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/aivedio/pipeline/shared/waitlist"
)

const pauseUsage = `usage: adapter pause provider|model|tenant NAME --ticket T --operator O --reason R
       adapter resume provider|model|tenant NAME --ticket T --operator O --reason R
       adapter pause list [--all] [--json]
  pause holds new work of a provider, a model or a tenant (its id) on the wait list
  with the reason "paused": nothing fails, jobs already running go on. resume moves
  that work back in its order; the reconciler's next scan wakes it as slots allow.
  Every pause and resume is recorded in scheduling_pauses. Needs the wait list
  (SCHED_WAITLIST, on by default) in the stages. (DATABASE_URL)`

// runPause serves `adapter pause` and, with resume set, `adapter resume`.
func runPause(ctx context.Context, args []string, resume bool) error {
	if !resume && len(args) > 0 && args[0] == "list" {
		return runPauseList(ctx, args[1:], os.Stdout)
	}
	if len(args) < 2 {
		return errors.New(pauseUsage)
	}
	scope, err := waitlist.PauseScope(args[0], args[1])
	if err != nil {
		return fmt.Errorf("%w\n%s", err, pauseUsage)
	}
	fs := flag.NewFlagSet("pause", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var d waitlist.Decision
	fs.StringVar(&d.Ticket, "ticket", "", "the ticket the decision is taken under (required)")
	fs.StringVar(&d.Operator, "operator", os.Getenv("USER"), "who decides")
	fs.StringVar(&d.Reason, "reason", "", "why (required)")
	if err := fs.Parse(args[2:]); err != nil {
		return fmt.Errorf("%w\n%s", err, pauseUsage)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q\n%s", fs.Arg(0), pauseUsage)
	}
	return inTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
		if !resume {
			p, err := waitlist.PauseWork(ctx, tx, scope, d)
			if err == nil {
				fmt.Fprintf(os.Stdout, "paused %s (pause %d, ticket %s); new work there waits with the reason \"paused\"\n", p.Scope, p.ID, p.Ticket)
			}
			return err
		}
		p, moved, err := waitlist.ResumeWork(ctx, tx, scope, d)
		if err == nil {
			fmt.Fprintf(os.Stdout, "resumed %s (pause %d, paused %s ago); %d waiting tasks go back in their order, woken as slots allow\n",
				p.Scope, p.ID, time.Since(p.PausedAt).Round(time.Second), moved)
		}
		return err
	})
}

// runPauseList serves `adapter pause list`.
func runPauseList(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("pause list", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	all := fs.Bool("all", false, "also the pauses that ended")
	asJSON := fs.Bool("json", false, "print JSON")
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("%w\n%s", err, pauseUsage)
	}
	var found []waitlist.Pause
	if err := inTx(ctx, func(ctx context.Context, tx pgx.Tx) (err error) {
		found, err = waitlist.Pauses(ctx, tx, *all)
		return err
	}); err != nil {
		return err
	}
	if *asJSON {
		return json.NewEncoder(out).Encode(found)
	}
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "PAUSE\tSCOPE\tTICKET\tOPERATOR\tPAUSED_AT\tRESUMED_AT\tREASON")
	for _, p := range found {
		resumed := "-"
		if p.ResumedAt != nil {
			resumed = p.ResumedAt.UTC().Format(time.RFC3339)
		}
		fmt.Fprintf(w, "%d\t%s\t%s\t%s\t%s\t%s\t%s\n", p.ID, p.Scope, p.Ticket, p.Operator, p.PausedAt.UTC().Format(time.RFC3339), resumed, p.Reason)
	}
	return w.Flush()
}
