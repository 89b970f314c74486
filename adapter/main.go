// Command adapter runs the pipeline's broker-side processes and operator
// tools:
//
//	go run ./adapter migrate up|down   apply or roll back the database schema
//	go run ./adapter topics apply      create the catalog's topics and groups on RocketMQ
//	go run ./adapter topics list       print the catalog with broker names
//
// Configuration comes from the environment (see README.md); each command
// loads only the blocks it needs.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"text/tabwriter"

	"github.com/aivedio/pipeline/adapter/topics"
	"github.com/aivedio/pipeline/migrations"
	"github.com/aivedio/pipeline/shared/catalog"
	"github.com/aivedio/pipeline/shared/config"
)

const usage = `usage: adapter <command>
  migrate up|down   apply or roll back the database schema (DATABASE_URL)
  topics apply      create the catalog's topics and groups (ROCKETMQ_NAMESRV, ROCKETMQ_ADMIN_CLASSPATH)
  topics list       print the topic catalog`

// migrateConfig is what `adapter migrate` reads.
type migrateConfig struct {
	config.Postgres
}

// topicsConfig is what `adapter topics` reads.
type topicsConfig struct {
	config.RocketMQ
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	logger := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if err := run(ctx, logger, os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "adapter:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, logger *slog.Logger, args []string) error {
	if len(args) < 2 {
		return errors.New(usage)
	}
	switch args[0] + " " + args[1] {
	case "migrate up", "migrate down":
		var cfg migrateConfig
		if err := config.Load(&cfg); err != nil {
			return err
		}
		if args[1] == "up" {
			return migrations.Up(ctx, cfg.URL)
		}
		return migrations.Down(ctx, cfg.URL)
	case "topics apply":
		var cfg topicsConfig
		if err := config.Load(&cfg); err != nil {
			return err
		}
		admin := &topics.Admin{
			Classpath: cfg.AdminClasspath,
			Namesrv:   cfg.Namesrv,
			Cluster:   cfg.Cluster,
			Logger:    logger,
		}
		return admin.Apply(ctx, catalog.Topics(), catalog.AllGroups())
	case "topics list":
		return printCatalog()
	}
	return fmt.Errorf("unknown command %q\n%s", args[0]+" "+args[1], usage)
}

func printCatalog() error {
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "TOPIC\tBROKER NAME\tTYPE")
	for _, t := range catalog.Topics() {
		fmt.Fprintf(w, "%s\t%s\t%s\n", t.Name, t.BrokerName(), t.Type)
	}
	fmt.Fprintln(w, "\nGROUP\tBROKER NAME\tSTAGE\tMAX DELIVERIES\tREADS")
	for _, g := range catalog.Groups() {
		for _, s := range g.Subscriptions {
			fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%s [%s]\n", g.Name, g.BrokerName(), g.Stage, g.MaxDeliveryAttempts, s.Topic.Name, s.FilterExpression())
		}
	}
	return w.Flush()
}
