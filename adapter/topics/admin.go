// Package topics applies the topic catalog (package catalog) to a running
// RocketMQ cluster: every physical topic with its message type, every
// consumer group with its maximum delivery attempts and ordering.
//
// The RocketMQ 5 Go client has no administration API, so Admin drives
// RocketMQ's own admin tool (org.apache.rocketmq.tools.command.MQAdminStartup)
// from the jars of the broker version in use. Both commands it runs create or
// update, so applying the catalog twice is harmless.
//
// On a cluster with ACL 2.0 on, the tool signs its requests with the
// credentials in $ROCKETMQ_HOME/conf/tools.yml: Admin writes that file,
// readable by the user only, into a temporary home for the length of a call.
package topics

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aivedio/pipeline/shared/catalog"
)

// adminTool is RocketMQ's command-line administration entry point.
const adminTool = "org.apache.rocketmq.tools.command.MQAdminStartup"

// Admin applies the catalog through RocketMQ's admin tool.
type Admin struct {
	Java      string // java binary; "java" when empty
	Classpath string // the RocketMQ tools jars, e.g. "/opt/rocketmq/lib/*"
	Namesrv   string // host:port of a name server
	Cluster   string // broker cluster to create topics and groups in
	// AccessKey and SecretKey sign the tool's requests on a cluster with
	// ACL on; empty leaves the tool to its own configuration.
	AccessKey, SecretKey string
	// QueuesPerTopic is the read and write queue count of each topic; 8 when zero.
	QueuesPerTopic int
	// Parallel bounds how many admin commands (each a JVM) run at once; 4 when zero.
	Parallel int
	Logger   *slog.Logger
}

// Command is one admin tool invocation.
type Command struct {
	What string   // e.g. "topic generation_submit_delay (DELAY)"
	Args []string // arguments after the tool's class name
}

// Commands lists the admin commands that apply the given topics and groups.
func (a *Admin) Commands(topics []catalog.Topic, groups []catalog.Group) []Command {
	queues := a.QueuesPerTopic
	if queues == 0 {
		queues = 8
	}
	var cmds []Command
	for _, t := range topics {
		cmds = append(cmds, Command{
			What: fmt.Sprintf("topic %s (%s)", t.BrokerName(), t.Type),
			Args: []string{"updateTopic", "-n", a.Namesrv, "-c", a.Cluster, "-t", t.BrokerName(),
				"-r", strconv.Itoa(queues), "-w", strconv.Itoa(queues), "-a", "+message.type=" + string(t.Type)},
		})
	}
	for _, g := range groups {
		// RocketMQ counts retries; the first delivery is not one.
		args := []string{"updateSubGroup", "-n", a.Namesrv, "-c", a.Cluster, "-g", g.BrokerName(),
			"-r", strconv.Itoa(g.MaxDeliveryAttempts - 1)}
		if g.Orderly {
			args = append(args, "-o", "true")
		}
		cmds = append(cmds, Command{What: fmt.Sprintf("group %s (max %d deliveries)", g.BrokerName(), g.MaxDeliveryAttempts), Args: args})
	}
	return cmds
}

// Apply creates or updates every topic and group, running up to Parallel
// admin commands at once, and returns every failure joined.
func (a *Admin) Apply(ctx context.Context, topics []catalog.Topic, groups []catalog.Group) error {
	if a.Classpath == "" || a.Namesrv == "" {
		return errors.New("apply topics: ROCKETMQ_ADMIN_CLASSPATH and ROCKETMQ_NAMESRV must be set (the RocketMQ tools jars and a name server)")
	}
	return a.RunAll(ctx, a.Commands(topics, groups))
}

// RunAll runs admin commands, up to Parallel at once, and returns every
// failure joined.
func (a *Admin) RunAll(ctx context.Context, cmds []Command) error {
	home, err := a.credentialsHome()
	if err != nil {
		return err
	}
	defer removeHome(home)
	parallel := a.Parallel
	if parallel == 0 {
		parallel = 4
	}
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
		sem  = make(chan struct{}, parallel)
	)
	for _, cmd := range cmds {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if err := a.run(ctx, home, cmd); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// attempts bounds tries of one command: on a loaded machine the tool's
// own 3 s name-server calls time out, which it reports as an unknown cluster.
const attempts = 3

// credentialsHome makes a RocketMQ home whose conf/tools.yml holds the
// credentials, or returns "" when there are none.
func (a *Admin) credentialsHome() (string, error) {
	if a.AccessKey == "" {
		return "", nil
	}
	home, err := os.MkdirTemp("", "rocketmq-admin-")
	if err != nil {
		return "", fmt.Errorf("admin credentials: %w", err)
	}
	yml := fmt.Sprintf("accessKey: %q\nsecretKey: %q\n", a.AccessKey, a.SecretKey)
	if err := os.Mkdir(filepath.Join(home, "conf"), 0o700); err != nil {
		os.RemoveAll(home)
		return "", fmt.Errorf("admin credentials: %w", err)
	}
	if err := os.WriteFile(filepath.Join(home, "conf", "tools.yml"), []byte(yml), 0o600); err != nil {
		os.RemoveAll(home)
		return "", fmt.Errorf("admin credentials: %w", err)
	}
	return home, nil
}

func removeHome(home string) {
	if home != "" {
		_ = os.RemoveAll(home)
	}
}

func (a *Admin) run(ctx context.Context, home string, cmd Command) error {
	var err error
	for try := 1; try <= attempts; try++ {
		if err = a.runOnce(ctx, home, cmd); err == nil || ctx.Err() != nil {
			return err
		}
		if try < attempts {
			select {
			case <-time.After(time.Duration(try) * 2 * time.Second):
			case <-ctx.Done():
				return err
			}
		}
	}
	return err
}

func (a *Admin) runOnce(ctx context.Context, home string, cmd Command) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	java := a.Java
	if java == "" {
		java = "java"
	}
	// Small heap and the client compiler: each command is a short-lived JVM.
	args := []string{"-Xms32m", "-Xmx128m", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-cp", a.Classpath}
	if home != "" {
		args = append(args, "-Drocketmq.home.dir="+home)
	}
	args = append(append(args, adminTool), cmd.Args...)
	var out bytes.Buffer
	c := exec.CommandContext(ctx, java, args...)
	c.Stdout, c.Stderr = &out, &out
	err := c.Run()
	// The admin tool exits 0 even when a sub-command fails: read what it said.
	text := out.String()
	if err == nil && strings.Contains(text, "success") {
		if a.Logger != nil {
			a.Logger.InfoContext(ctx, "applied", slog.String("what", cmd.What))
		}
		return nil
	}
	return fmt.Errorf("apply %s: %s", cmd.What, firstFailureLine(text, err))
}

// firstFailureLine picks the admin tool's own explanation out of its output.
func firstFailureLine(out string, runErr error) string {
	for _, line := range strings.Split(out, "\n") {
		line = strings.TrimSpace(line)
		if strings.Contains(line, "DESC:") || strings.HasPrefix(line, "[error]") || strings.HasPrefix(line, "Caused by:") {
			return line
		}
	}
	if runErr != nil {
		return fmt.Sprintf("%v (is Java 17 installed and ROCKETMQ_ADMIN_CLASSPATH right?)", runErr)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	return "admin tool did not report success: " + lines[len(lines)-1]
}
