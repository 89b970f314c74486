// Command adapter runs the pipeline's broker-side processes and operator
// tools:
//
//	go run ./adapter migrate up|down              apply or roll back the database schema
//	go run ./adapter topics apply|list            create (or print) the catalog's topics and groups
//	go run ./adapter topics grant --user U ...    make an ACL user with the least one binary needs
//	go run ./adapter relay                        publish the outbox to RocketMQ
//	go run ./adapter source --group G --sink URL  deliver a consumer group's messages to its stage
//	go run ./adapter dlq drain --group G          move a group's dead letters into message_quarantine
//	go run ./adapter tenants create --name N ...  create a tenant and print its API key once
//	go run ./adapter tenants quota <tenant> ...   set one tenant's limits on what it keeps stored
//	go run ./adapter quarantine list|show         inspect message_quarantine
//	go run ./adapter replay ...                   dry-run, approve and execute replays of quarantined messages
//	go run ./adapter capacity rate|consumers|...  the seed's capacity arithmetic (7.13.1-7.13.4)
//	go run ./adapter tasks resolve <task> ...     a person's decision on a lost submit (NEEDS_ATTENTION)
//
// Configuration comes from the environment (see docs/configuration.md); each command
// loads only the blocks it needs. Long-running commands serve /healthz,
// /readyz and /metrics on HTTP_ADDR and stop cleanly on SIGTERM.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

const usage = `usage: adapter <command>
  migrate up|down                  apply or roll back the database schema (DATABASE_URL)
  topics apply                     create the catalog's topics and groups (ROCKETMQ_NAMESRV, ROCKETMQ_ADMIN_CLASSPATH)
  topics list                      print the topic catalog
  topics grant --user U --role publisher|source|drain [--group G] < password
                                   make (or update) an ACL user with the least one binary needs
  relay                            publish the outbox to RocketMQ
  source --group G [--sink URL]    deliver consumer group G's messages to its stage function
  dlq drain --group G              move group G's dead letters into message_quarantine
  tenants create --name N --credits C [--priority P] [--admin]
                                   create a tenant and print its API key once (DATABASE_URL)
  tenants quota <tenant-id> [--max-assets N|default] [--max-stored-bytes B|default]
                                   one tenant's limits on what it keeps stored (DATABASE_URL)
  quarantine list [filters]        list quarantined messages (--consumer, --class, --code, --status, --since, --until, --limit, --json)
  quarantine show <id>             one quarantined message whole, with its replays
  replay --event ID --dry-run      what replaying a quarantined message would do (recorded in message_replays)
  replay --event ID --approve --ticket T --operator O --reason R
                                   approve it; prints the approval id
  replay --approval ID --execute   write the approved replay to the outbox
  replay --bulk --consumer C [filters] --dry-run | --approve ... | --execute-ticket T
                                   the same for every open message of a consumer group
  capacity rate|consumers|drain|storage [flags] [--json]
                                   the seed's capacity arithmetic: message rate, consumers, drain time, broker storage
  pause provider|model|tenant NAME --ticket T --operator O --reason R
                                   hold new work there on the wait list, audited; pause list [--all] shows the pauses
  resume provider|model|tenant NAME --ticket T --operator O --reason R
                                   let it go, in its order (DATABASE_URL)
  tasks resolve <task> (--job ID | --no-job) --ticket T --operator O [--reason R]
                                   a person's decision on a task in NEEDS_ATTENTION reconcile.submit_unknown (audited)`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "adapter:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string) error {
	if len(args) == 0 {
		return errors.New(usage)
	}
	if answerHelp(args, os.Stdout) {
		return nil
	}
	switch args[0] {
	case "migrate":
		return runMigrate(ctx, args[1:])
	case "topics":
		return runTopics(ctx, args[1:])
	case "relay":
		return runRelay(ctx, args[1:])
	case "source":
		return runSource(ctx, args[1:])
	case "tenants":
		return runTenants(ctx, args[1:])
	case "quarantine":
		return runQuarantine(ctx, args[1:])
	case "replay":
		return runReplay(ctx, args[1:])
	case "capacity":
		return runCapacity(args[1:], os.Stdout)
	case "tasks":
		return runTasks(ctx, args[1:])
	case "pause":
		return runPause(ctx, args[1:], false)
	case "resume":
		return runPause(ctx, args[1:], true)
	case "dlq":
		if len(args) < 2 || args[1] != "drain" {
			return errors.New("usage: adapter dlq drain --group G")
		}
		return runDrain(ctx, args[2:])
	}
	return fmt.Errorf("unknown command %q\n%s", args[0], usage)
}
