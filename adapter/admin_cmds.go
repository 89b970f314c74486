package main

import (
	"context"
	"fmt"
	"os"
	"text/tabwriter"

	"github.com/aivedio/pipeline/adapter/topics"
	"github.com/aivedio/pipeline/migrations"
	"github.com/aivedio/pipeline/shared/catalog"
	"github.com/aivedio/pipeline/shared/config"
	"github.com/aivedio/pipeline/shared/telemetry"
)

func runMigrate(ctx context.Context, args []string) error {
	if len(args) != 1 || (args[0] != "up" && args[0] != "down") {
		return fmt.Errorf("usage: adapter migrate up|down")
	}
	var cfg config.Migrate
	if err := config.Load(&cfg); err != nil {
		return err
	}
	if args[0] == "up" {
		return migrations.Up(ctx, cfg.URL)
	}
	return migrations.Down(ctx, cfg.URL)
}

func runTopics(ctx context.Context, args []string) error {
	if len(args) != 1 {
		return fmt.Errorf("usage: adapter topics apply|list")
	}
	switch args[0] {
	case "list":
		return printCatalog()
	case "apply":
		var cfg config.Topics
		if err := config.Load(&cfg); err != nil {
			return err
		}
		admin := &topics.Admin{
			Classpath: cfg.AdminClasspath,
			Namesrv:   cfg.Namesrv,
			Cluster:   cfg.Cluster,
			Logger:    telemetry.NewLogger("text"),
		}
		return admin.Apply(ctx, catalog.Topics(), catalog.AllGroups())
	}
	return fmt.Errorf("usage: adapter topics apply|list")
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
	fmt.Fprintf(w, "%s\t%s\t(dlq drain)\t%d\t%%DLQ%%<group>\n", catalog.DLQDrain.Name, catalog.DLQDrain.BrokerName(), catalog.DLQDrain.MaxDeliveryAttempts)
	return w.Flush()
}
