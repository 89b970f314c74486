package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
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
	const use = "usage: adapter topics apply|list|grant"
	if len(args) == 0 {
		return errors.New(use)
	}
	switch args[0] {
	case "list":
		return printCatalog()
	case "apply", "grant":
		var cfg config.Topics
		if err := config.Load(&cfg); err != nil {
			return err
		}
		admin := &topics.Admin{
			Classpath: cfg.AdminClasspath,
			Namesrv:   cfg.Namesrv,
			Cluster:   cfg.Cluster,
			AccessKey: cfg.RocketMQAdmin.AccessKey,
			SecretKey: cfg.RocketMQAdmin.SecretKey,
			Logger:    telemetry.NewLogger("text"),
		}
		if admin.AccessKey == "" {
			admin.AccessKey, admin.SecretKey = cfg.RocketMQ.AccessKey, cfg.RocketMQ.SecretKey
		}
		if args[0] == "apply" {
			return admin.Apply(ctx, catalog.Topics(), catalog.AllGroups())
		}
		return runGrant(ctx, admin, args[1:], os.Stdin)
	}
	return errors.New(use)
}

const grantUsage = `usage: adapter topics grant --user U --role publisher|source|drain [--group G] < password
  publisher  relay and replay: publish to every topic of the catalog
  source     adapter source --group G: consume G's topics as G
  drain      adapter dlq drain --group G: consume G's dead-letter topic as the drain group`

// runGrant makes an ACL user with the least a binary needs, reading its
// password from the first line of stdin so it stays out of shell history.
func runGrant(ctx context.Context, admin *topics.Admin, args []string, stdin io.Reader) error {
	fs := flag.NewFlagSet("topics grant", flag.ContinueOnError)
	user := fs.String("user", "", "ACL user to create or update")
	role := fs.String("role", "", "publisher, source or drain")
	groupName := fs.String("group", "", "consumer group, for source and drain")
	if err := fs.Parse(args); err != nil || *user == "" {
		return errors.New(grantUsage)
	}
	var grant topics.Grant
	switch *role {
	case "publisher":
		grant = topics.PublisherGrant(catalog.Topics())
	case "source", "drain":
		group, err := catalog.GroupByName(*groupName)
		if err != nil {
			return fmt.Errorf("%w\n%s", err, grantUsage)
		}
		grant = topics.ConsumerGrant(group)
		if *role == "drain" {
			grant = topics.DrainGrant(group, catalog.DLQDrain)
		}
	default:
		return errors.New(grantUsage)
	}
	line, err := bufio.NewReader(stdin).ReadString('\n')
	password := strings.TrimRight(line, "\r\n")
	if password == "" {
		return fmt.Errorf("read the password of %s from stdin: none given (%v)", *user, err)
	}
	if err := admin.GrantUser(ctx, *user, password, grant); err != nil {
		return err
	}
	fmt.Printf("granted %s to %s on %s\n", strings.Join(grant.Actions, ","), *user, strings.Join(grant.Resources, ","))
	return nil
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
