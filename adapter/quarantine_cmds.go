package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/user"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/aivedio/pipeline/shared/config"
	"github.com/aivedio/pipeline/shared/quarantine"
	"github.com/aivedio/pipeline/shared/replay"
	"github.com/aivedio/pipeline/shared/replay/rules"
)

const quarantineUsage = `usage: adapter quarantine list [--consumer C] [--class X] [--category K] [--code X] [--status S] [--since T] [--until T] [--limit N] [--json]
       adapter quarantine show <quarantine id> [--body] [--json]
       adapter quarantine discard <quarantine id> --ticket T --reason R [--operator O] [--json]
  --status is QUARANTINED (default), REPLAYED, DISCARDED or ALL; --code takes a prefix as envelope.*;
  --category is CODE_DEFECT, DATA_DEFECT, PERMISSION, DEPENDENCY or DIRTY_HISTORY;
  T is RFC 3339 (2026-11-30T08:00:00Z) or an age (90m, 24h, 7d)`

// opTimeout bounds one operator command's database work; bulk commands
// get bulkOpTimeout.
const (
	opTimeout     = 30 * time.Second
	bulkOpTimeout = 10 * time.Minute
)

// runQuarantine serves `adapter quarantine list|show`.
func runQuarantine(ctx context.Context, args []string) error {
	return quarantineCmd(ctx, args, os.Stdout)
}

func quarantineCmd(ctx context.Context, args []string, out io.Writer) error {
	if len(args) == 0 {
		return errors.New(quarantineUsage)
	}
	switch args[0] {
	case "list":
		return quarantineList(ctx, args[1:], out)
	case "show":
		return quarantineShow(ctx, args[1:], out)
	case "discard":
		return quarantineDiscard(ctx, args[1:], out)
	}
	return fmt.Errorf("unknown quarantine command %q\n%s", args[0], quarantineUsage)
}

// filterFlags are the flags that select quarantined messages.
type filterFlags struct {
	consumer, class, category, code, status, since, until *string
	limit                                                 *int
}

func addFilterFlags(fs *flag.FlagSet, withStatus bool) filterFlags {
	f := filterFlags{
		consumer: fs.String("consumer", "", "consumer group, e.g. cg.scheduler.submit.v1"),
		class:    fs.String("class", "", "error class, e.g. permanent or dlq"),
		category: fs.String("category", "", "CODE_DEFECT, DATA_DEFECT, PERMISSION, DEPENDENCY or DIRTY_HISTORY"),
		code:     fs.String("code", "", "error code, or a prefix ending in *"),
		since:    fs.String("since", "", "received at or after T"),
		until:    fs.String("until", "", "received before T"),
		limit:    fs.Int("limit", quarantine.DefaultLimit, "at most N messages"),
	}
	if withStatus {
		f.status = fs.String("status", "", "QUARANTINED, REPLAYED, DISCARDED or ALL")
	}
	return f
}

// filter reads the flags; times are relative to now.
func (f filterFlags) filter(now time.Time) (quarantine.Filter, error) {
	out := quarantine.Filter{Consumer: *f.consumer, ErrorClass: *f.class, Category: quarantine.Category(*f.category), ErrorCode: *f.code, Limit: *f.limit}
	if f.status != nil {
		out.Status = quarantine.Status(*f.status)
	}
	var err error
	if *f.since != "" {
		if out.Since, err = quarantine.ParseTime(*f.since, now); err != nil {
			return out, fmt.Errorf("--since: %w", err)
		}
	}
	if *f.until != "" {
		if out.Until, err = quarantine.ParseTime(*f.until, now); err != nil {
			return out, fmt.Errorf("--until: %w", err)
		}
	}
	if out.Limit < 1 || out.Limit > quarantine.MaxLimit {
		return out, fmt.Errorf("--limit must be from 1 to %d", quarantine.MaxLimit)
	}
	if _, err := out.Normalize(); err != nil {
		return out, err
	}
	return out, nil
}

// parseArgs parses flags that may come before or after the positional
// arguments, and returns the positional ones.
func parseArgs(fs *flag.FlagSet, args []string, usage string) ([]string, error) {
	fs.SetOutput(io.Discard) // the error returned says what is wrong
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, fmt.Errorf("%w\n%s", err, usage)
		}
		if fs.NArg() == 0 {
			return positional, nil
		}
		positional = append(positional, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

func quarantineList(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("quarantine list", flag.ContinueOnError)
	ff := addFilterFlags(fs, true)
	asJSON := fs.Bool("json", false, "print JSON")
	rest, err := parseArgs(fs, args, quarantineUsage)
	if err != nil {
		return err
	}
	if len(rest) > 0 {
		return fmt.Errorf("unexpected argument %q\n%s", rest[0], quarantineUsage)
	}
	f, err := ff.filter(time.Now())
	if err != nil {
		return fmt.Errorf("%w\n%s", err, quarantineUsage)
	}
	return withPool(ctx, opTimeout, func(ctx context.Context, pool *pgxpool.Pool) error {
		msgs, err := quarantine.List(ctx, pool, f)
		if err != nil {
			return err
		}
		if *asJSON {
			return printJSON(out, map[string]any{"items": msgs})
		}
		printList(out, msgs, f)
		return nil
	})
}

func quarantineShow(ctx context.Context, args []string, out io.Writer) error {
	const usage = "usage: adapter quarantine show <quarantine id> [--body] [--json]"
	fs := flag.NewFlagSet("quarantine show", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "print JSON")
	withBody := fs.Bool("body", false, "print the body whole, secrets included (the snapshot is redacted)")
	rest, err := parseArgs(fs, args, usage)
	if err != nil {
		return err
	}
	if len(rest) != 1 {
		return fmt.Errorf("name one quarantined message\n%s", usage)
	}
	id, err := parseID(rest[0], "quarantine id")
	if err != nil {
		return fmt.Errorf("%w\n%s", err, usage)
	}
	return withPool(ctx, opTimeout, func(ctx context.Context, pool *pgxpool.Pool) error {
		q, err := replay.NewDesk(pool, rules.All(), nil).Show(ctx, id)
		if err != nil {
			return err
		}
		if *asJSON {
			return printJSON(out, q)
		}
		printMessageDetail(out, q, *withBody)
		return nil
	})
}

func quarantineDiscard(ctx context.Context, args []string, out io.Writer) error {
	const usage = "usage: adapter quarantine discard <quarantine id> --ticket T --reason R [--operator O] [--json]"
	fs := flag.NewFlagSet("quarantine discard", flag.ContinueOnError)
	ticket := fs.String("ticket", "", "ticket the discard is decided under")
	reason := fs.String("reason", "", "why the message is never to be replayed")
	operator := fs.String("operator", whoAmI(), "who decides")
	asJSON := fs.Bool("json", false, "print JSON")
	rest, err := parseArgs(fs, args, usage)
	if err != nil {
		return err
	}
	if len(rest) != 1 {
		return fmt.Errorf("name one quarantined message\n%s", usage)
	}
	id, err := parseID(rest[0], "quarantine id")
	if err != nil {
		return fmt.Errorf("%w\n%s", err, usage)
	}
	return withPool(ctx, opTimeout, func(ctx context.Context, pool *pgxpool.Pool) error {
		d, err := replay.NewDesk(pool, rules.All(), nil).Discard(ctx, id, replay.Decision{Ticket: *ticket, Operator: *operator, Reason: *reason})
		if err != nil {
			return err
		}
		if *asJSON {
			return printJSON(out, d)
		}
		fmt.Fprintf(out, "discarded %s (%s, event %s): %d row(s), under %s by %s: %s\n",
			d.QuarantineID, d.Consumer, dash(d.EventID), d.Rows, d.Discard.Ticket, d.Discard.Operator, d.Discard.Reason)
		return nil
	})
}

// parseID reads a UUID argument.
func parseID(s, what string) (uuid.UUID, error) {
	id, err := uuid.Parse(s)
	if err != nil || len(s) != 36 {
		return uuid.Nil, fmt.Errorf("%s %q is not a UUID", what, s)
	}
	return id, nil
}

// withPool runs fn on a pool of DATABASE_URL, within timeout.
func withPool(ctx context.Context, timeout time.Duration, fn func(context.Context, *pgxpool.Pool) error) error {
	var cfg config.Migrate
	if err := config.Load(&cfg); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	pool, err := openPool(ctx, cfg.Postgres)
	if err != nil {
		return err
	}
	defer pool.Close()
	return fn(ctx, pool)
}

func printJSON(out io.Writer, v any) error {
	enc := json.NewEncoder(out)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// whoAmI is the operator recorded when --operator is not given: the login
// name running the command.
func whoAmI() string {
	if u, err := user.Current(); err == nil && strings.TrimSpace(u.Username) != "" {
		return u.Username
	}
	return "uid " + fmt.Sprint(os.Getuid())
}
