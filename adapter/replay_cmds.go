package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/aivedio/pipeline/shared/config"
	"github.com/aivedio/pipeline/shared/quarantine"
	"github.com/aivedio/pipeline/shared/replay"
	"github.com/aivedio/pipeline/shared/replay/rules"
)

const replayUsage = `usage:
  adapter replay --event ID [--consumer C] --dry-run [--operator O] [--json]
  adapter replay --event ID [--consumer C] --approve --ticket T --operator O --reason R [--json]
  adapter replay --plan ID --approve --ticket T --operator O --reason R [--json]
  adapter replay --approval ID --execute [--operator O] [--json]
  adapter replay --bulk --consumer C [--class X] [--code X] [--since T] [--until T] [--limit N] --dry-run [--json]
  adapter replay --bulk --consumer C [filters] --approve --ticket T --operator O --reason R [--expect N] [--json]
  adapter replay --bulk [--consumer C] --execute-ticket T [--operator O] [--json]
ID is an event id or a quarantine id (--event), a dry run's replay id (--plan), an approval id (--approval).
A replay is a new event written to the outbox for the original topic; consumer offsets are never reset.`

// replayArgs are the parsed flags of `adapter replay`.
type replayArgs struct {
	event, plan, approval          string
	bulk, dryRun, approve, execute bool
	executeTicket                  string
	ticket, operator, reason       string
	expect                         int
	json                           bool
	filter                         quarantine.Filter // Consumer alone outside --bulk
	filterSet                      []string          // the filter flags given
}

// runReplay serves `adapter replay`.
func runReplay(ctx context.Context, args []string) error {
	return replayCmd(ctx, args, os.Stdout)
}

func replayCmd(ctx context.Context, args []string, out io.Writer) error {
	a, err := parseReplay(args, time.Now())
	if err != nil {
		return fmt.Errorf("%w\n%s", err, replayUsage)
	}
	// REPLAY_WINDOW: the desk refuses events older than the window the
	// reconcile scan prunes the inbox with.
	var cfg config.ReplayCommand
	if err := config.Load(&cfg); err != nil {
		return err
	}
	timeout := opTimeout
	if a.bulk {
		timeout = bulkOpTimeout
	}
	return withPool(ctx, timeout, func(ctx context.Context, pool *pgxpool.Pool) error {
		return a.run(ctx, replay.NewDesk(pool, rules.All(), &replay.DeskOpts{ReplayWindow: cfg.ReplayWindow}), out)
	})
}

// parseReplay checks the flags and their combination; nothing touches the
// database before they make sense.
func parseReplay(args []string, now time.Time) (replayArgs, error) {
	var a replayArgs
	if len(args) == 0 {
		return a, errors.New("no arguments")
	}
	fs := flag.NewFlagSet("replay", flag.ContinueOnError)
	fs.StringVar(&a.event, "event", "", "event id or quarantine id of the message")
	fs.StringVar(&a.plan, "plan", "", "replay id of a recorded dry run")
	fs.StringVar(&a.approval, "approval", "", "approval id to execute")
	fs.BoolVar(&a.bulk, "bulk", false, "every open message the filter selects")
	fs.BoolVar(&a.dryRun, "dry-run", false, "show what a replay would do, and record the dry run")
	fs.BoolVar(&a.approve, "approve", false, "approve the replay")
	fs.BoolVar(&a.execute, "execute", false, "execute an approval")
	fs.StringVar(&a.executeTicket, "execute-ticket", "", "execute every approval of the ticket")
	fs.StringVar(&a.ticket, "ticket", "", "ticket the approval is made under")
	fs.StringVar(&a.operator, "operator", "", "who approves or runs it")
	fs.StringVar(&a.reason, "reason", "", "why")
	fs.IntVar(&a.expect, "expect", 0, "approve only if the filter still selects N messages (the dry run's count)")
	fs.BoolVar(&a.json, "json", false, "print JSON")
	ff := addFilterFlags(fs, false)
	rest, err := parseArgs(fs, args, "")
	if err != nil {
		return a, errors.Unwrap(err) // parseArgs adds the usage; replayCmd adds it once
	}
	if len(rest) > 0 {
		return a, fmt.Errorf("unexpected argument %q (every value goes with a flag)", rest[0])
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	for _, name := range []string{"consumer", "class", "code", "since", "until", "limit", "expect"} {
		if set[name] {
			a.filterSet = append(a.filterSet, "--"+name)
		}
	}
	a.filter.Consumer = *ff.consumer

	modes := 0
	for _, on := range []bool{a.dryRun, a.approve, a.execute, a.executeTicket != ""} {
		if on {
			modes++
		}
	}
	if modes != 1 {
		return a, errors.New("say what to do: exactly one of --dry-run, --approve, --execute or --execute-ticket")
	}
	targets := 0
	for _, on := range []bool{a.event != "", a.plan != "", a.approval != "", a.bulk} {
		if on {
			targets++
		}
	}
	if a.executeTicket != "" && !a.bulk {
		a.bulk, targets = true, targets+1 // --execute-ticket is a bulk step with or without --bulk
	}
	if targets != 1 {
		return a, errors.New("name what to replay: exactly one of --event, --plan, --approval or --bulk")
	}
	if a.approve {
		for name, v := range map[string]string{"--ticket": a.ticket, "--operator": a.operator, "--reason": a.reason} {
			if strings.TrimSpace(v) == "" {
				return a, fmt.Errorf("--approve needs %s (all of --ticket, --operator and --reason are recorded)", name)
			}
		}
	} else if a.ticket != "" || a.reason != "" {
		return a, errors.New("--ticket and --reason go with --approve (--execute-ticket names the ticket to run)")
	}
	if a.operator == "" {
		a.operator = whoAmI()
	}

	switch {
	case a.event != "":
		if a.execute {
			return a, errors.New("--execute takes --approval <id>: approve the replay first (--approve prints the approval id)")
		}
		if _, err := parseID(a.event, "--event"); err != nil {
			return a, err
		}
		if extra := without(a.filterSet, "--consumer"); len(extra) > 0 {
			return a, fmt.Errorf("%s select messages for --bulk; with --event only --consumer applies", strings.Join(extra, ", "))
		}
	case a.plan != "":
		if !a.approve {
			return a, errors.New("--plan takes --approve: it approves the dry run with that replay id")
		}
		if _, err := parseID(a.plan, "--plan"); err != nil {
			return a, err
		}
		if len(a.filterSet) > 0 {
			return a, fmt.Errorf("%s do not apply to --plan", strings.Join(a.filterSet, ", "))
		}
	case a.approval != "":
		if !a.execute {
			return a, errors.New("--approval takes --execute")
		}
		if _, err := parseID(a.approval, "--approval"); err != nil {
			return a, err
		}
		if len(a.filterSet) > 0 {
			return a, fmt.Errorf("%s do not apply to --approval", strings.Join(a.filterSet, ", "))
		}
	case a.bulk:
		if a.execute {
			return a, errors.New("a bulk replay is executed by ticket: --execute-ticket T")
		}
		if a.executeTicket != "" {
			if extra := without(a.filterSet, "--consumer"); len(extra) > 0 {
				return a, fmt.Errorf("%s do not apply to --execute-ticket: it runs what was approved under the ticket (--consumer narrows it to one group)", strings.Join(extra, ", "))
			}
		} else if !set["consumer"] {
			return a, errors.New("--bulk needs --consumer: a bulk replay takes the messages of one consumer group")
		}
		if set["expect"] && !a.approve {
			return a, errors.New("--expect goes with --bulk --approve")
		}
		if a.filter, err = ff.filter(now); err != nil {
			return a, err
		}
	}
	if a.expect < 0 {
		return a, errors.New("--expect must not be negative")
	}
	return a, nil
}

// without returns names minus drop.
func without(names []string, drop string) []string {
	var out []string
	for _, n := range names {
		if n != drop {
			out = append(out, n)
		}
	}
	return out
}

// run does what the flags ask.
func (a replayArgs) run(ctx context.Context, desk *replay.Desk, out io.Writer) error {
	decision := replay.Decision{Ticket: a.ticket, Operator: a.operator, Reason: a.reason}
	switch {
	case a.event != "":
		ref := replay.Ref{ID: uuid.MustParse(a.event), Consumer: a.filter.Consumer}
		rep, err := desk.Plan(ctx, ref, a.operator)
		if err != nil {
			return err
		}
		if a.dryRun {
			return a.print(out, rep, func() { printReport(out, rep) })
		}
		return a.approveAndPrint(ctx, desk, out, rep.ReplayID, decision)
	case a.plan != "":
		return a.approveAndPrint(ctx, desk, out, uuid.MustParse(a.plan), decision)
	case a.approval != "":
		x, err := desk.Execute(ctx, uuid.MustParse(a.approval), a.operator)
		if err != nil {
			return err
		}
		return a.print(out, x, func() { printExecution(out, x) })
	case a.executeTicket != "":
		x, err := desk.ExecuteBulk(ctx, replay.ExecuteBulkParams{Ticket: a.executeTicket, Consumer: a.filter.Consumer, Operator: a.operator})
		if err != nil {
			return err
		}
		if err := a.print(out, x, func() { printBulkExecution(out, x) }); err != nil {
			return err
		}
		if len(x.Failed) > 0 {
			return fmt.Errorf("%d of the ticket's approvals failed and stay APPROVED; run the command again to retry them", len(x.Failed))
		}
		return nil
	case a.dryRun:
		b, err := desk.PlanBulk(ctx, a.filter)
		if err != nil {
			return err
		}
		return a.print(out, b, func() { printBulk(out, b, false) })
	default:
		b, err := desk.ApproveBulk(ctx, a.filter, decision, a.expect)
		if err != nil {
			return err
		}
		return a.print(out, b, func() { printBulk(out, b, true) })
	}
}

// approveAndPrint approves a dry run and prints the result; a refusal is
// printed and returned as the error.
func (a replayArgs) approveAndPrint(ctx context.Context, desk *replay.Desk, out io.Writer, id uuid.UUID, d replay.Decision) error {
	rep, err := desk.Approve(ctx, id, d)
	if err != nil && !errors.Is(err, replay.ErrRefused) {
		return err
	}
	if perr := a.print(out, rep, func() { printReport(out, rep) }); perr != nil {
		return perr
	}
	if err != nil {
		return err
	}
	if !a.json {
		fmt.Fprintf(out, "\napproval id: %s\nexecute it: go run ./adapter replay --approval %s --execute\n", rep.ReplayID, rep.ReplayID)
	}
	return nil
}

// print writes v as JSON with --json, else runs human.
func (a replayArgs) print(out io.Writer, v any, human func()) error {
	if a.json {
		return printJSON(out, v)
	}
	human()
	return nil
}
