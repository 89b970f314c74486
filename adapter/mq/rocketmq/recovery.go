package rocketmq

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	rmq "github.com/apache/rocketmq-clients/golang/v5"
	v2 "github.com/apache/rocketmq-clients/golang/v5/protocol/v2"

	"github.com/aivedio/pipeline/adapter/mq"
)

// This file holds how a Consumer notices a proxy that lost its client's
// settings or a receive that hangs, and replaces its client.

// Replacement pacing: see Consumer.
const (
	reopenAfter     = 3
	reopenFloor     = time.Second
	reopenCeiling   = 2 * time.Minute
	reopenReachable = 2 * time.Second
	// watchEvery is how often the watcher asks for the topic's route while
	// receives fail: the moment a broker serves it again is what a
	// consumer's recovery is counted from.
	watchEvery = 250 * time.Millisecond
	// hungAfter: a receive unanswered this long past its await is hung. The
	// proxy answers a long poll by its await; the client's own deadline
	// comes only 3 s later, on every receive of a hung client.
	hungAfter = time.Second
	// routeTimeout bounds the watcher's route query.
	routeTimeout = 2 * time.Second
)

// answered marks the receive of sc sent at sent as no longer awaited.
func (c *Consumer) answered(sc rmq.SimpleConsumer, sent time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.consumer == sc && c.awaiting.Equal(sent) {
		c.awaiting = time.Time{}
	}
}

// hung reports a receive of the current client unanswered well past its
// long poll. The caller holds c.mu.
func (c *Consumer) hung() bool {
	return !c.awaiting.IsZero() && time.Since(c.awaiting) > c.params.Await+hungAfter
}

// serving reports whether a broker serves the consumer's topics again: the
// proxy answers a route query for each with readable queues. A proxy that
// refuses the query itself is up, and a fresh client is the only way to
// find out more.
func (c *Consumer) serving() bool {
	for topic := range c.params.Filters {
		n, err := QueryRoute(context.Background(), c.cfg, topic, routeTimeout)
		if errors.Is(err, mq.ErrUnauthenticated) || errors.Is(err, mq.ErrForbidden) {
			continue
		}
		if err != nil || n == 0 {
			return false
		}
	}
	return true
}

// succeeded ends a failure streak with a receive sent at sent. The
// consumer was listening again from then: a long poll on an idle topic
// answers only after its await, but a message published meanwhile would
// have been delivered at once. So the recovery line's deaf time ends at
// sent, and the line says when that was (listening_since).
func (c *Consumer) succeeded(sent time.Time) {
	c.mu.Lock()
	streak, since := c.streak, c.failingSince
	c.failures, c.streak, c.reopenWait, c.nextReopen = 0, 0, 0, time.Time{}
	c.mu.Unlock()
	if streak > 0 {
		c.log.Info("rocketmq consumer receiving again", slog.String("consumer_group", c.params.Group), slog.String("topic", c.topics()),
			slog.Int("failures", streak), slog.Time("listening_since", sent),
			slog.Duration("deaf_for", max(sent.Sub(since), 0).Round(time.Millisecond)))
	}
}

// settingsLost reports an answer of a proxy that is up but no longer knows
// the client's settings: its receive reads them and fails on their absence
// (a NullPointerException naming Settings), its heartbeat refuses the
// client as UNRECOGNIZED_CLIENT_TYPE.
func settingsLost(err error) bool {
	if status, ok := rmq.AsErrRpcStatus(err); ok && v2.Code(status.GetCode()) == v2.Code_UNRECOGNIZED_CLIENT_TYPE {
		return true
	}
	text := err.Error()
	return strings.Contains(text, "UNRECOGNIZED_CLIENT_TYPE") || strings.Contains(text, "cannot find client settings") ||
		strings.Contains(text, `"settings" is null`) || strings.Contains(text, "settings is null") ||
		strings.Contains(text, "Settings.getSubscription()") || strings.Contains(text, "Settings.getBackoffPolicy()")
}

// proxyAnswered reports a failure the proxy itself answered (a status of
// its own): the proxy is up, whatever went wrong.
func proxyAnswered(err error) bool {
	_, ok := rmq.AsErrRpcStatus(err)
	return ok
}

// failed counts a receive failure of sc and replaces the client when the
// proxy lost its settings, or once other failures pile up. A replacement
// that cannot start is tried again on a later failure. The lock is not held
// while the new client starts, so ACKs of messages in flight go on
// meanwhile. replaced reports a fresh client that started now, and whose
// predecessor was not itself replaced in the last reopenReachable: a
// client the proxy refuses again at once is retried at the caller's pace.
func (c *Consumer) failed(sc rmq.SimpleConsumer, cause error) (replaced bool, err error) {
	lost := settingsLost(cause)
	c.mu.Lock()
	if c.consumer != sc || c.reopening {
		c.mu.Unlock()
		return false, nil // replaced, or being replaced, by a concurrent receive
	}
	if c.streak == 0 {
		c.failingSince = time.Now()
	}
	c.failures++
	c.streak++
	if !c.watching && c.closed != nil {
		c.watching = true
		go c.watch()
	}
	if lost || proxyAnswered(cause) {
		c.reopenWait, c.nextReopen = 0, time.Time{}
	}
	if !lost && c.failures < reopenAfter {
		c.mu.Unlock()
		return false, nil
	}
	waiting := time.Now().Before(c.nextReopen)
	soon := time.Since(c.lastReopen) >= reopenReachable
	again := time.Since(c.lastReplaced) >= reopenReachable
	c.reopening = true
	c.mu.Unlock()

	// No client starts while no broker serves the topic: its receives
	// would hang, and the watcher replaces it the moment one does. A
	// failed start waits out its backoff, which ends early once a broker
	// serves the topic.
	if (waiting && !soon) || !c.serving() {
		c.mu.Lock()
		c.reopening = false
		c.mu.Unlock()
		return false, nil
	}
	reason := "receives failing"
	if lost {
		reason = "the proxy lost the client's settings"
	}
	if err := c.replace(sc, reason); err != nil {
		return false, err
	}
	return again, nil
}

// replace starts a new client in place of sc, which the caller marked
// c.reopening. On success the old client's receives end and it stops.
func (c *Consumer) replace(sc rmq.SimpleConsumer, reason string) error {
	fresh, err := c.open()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.reopening = false
	c.lastReopen = time.Now()
	if err != nil {
		c.reopenWait = min(max(2*c.reopenWait, reopenFloor), reopenCeiling)
		c.nextReopen = c.lastReopen.Add(c.reopenWait)
		return fmt.Errorf("replace rocketmq consumer (next try in %s, or once the proxy's port accepts): %w", c.reopenWait, err)
	}
	if c.retire != nil {
		c.retire()
	}
	c.consumer, c.failures, c.reopenWait, c.nextReopen, c.awaiting = fresh, 0, 0, time.Time{}, time.Time{}
	c.lastReplaced = c.lastReopen
	c.retired, c.retire = context.WithCancel(context.Background())
	c.log.Info("rocketmq consumer replaced", slog.String("consumer_group", c.params.Group), slog.String("topic", c.topics()),
		slog.String("reason", reason))
	// The old client's stop waits on the broker; it must not hold receives.
	go func() { _ = sc.GracefulStop() }()
	return nil
}

// watch runs while receives are failing: every watchEvery, a client that
// has failed since its start, or whose receive hangs (and that was not
// replaced in the last reopenReachable), is replaced once a broker serves
// the topic, without waiting for a receive of it to fail again. It ends
// when a receive succeeds, or with Close.
func (c *Consumer) watch() {
	tick := time.NewTicker(watchEvery)
	defer tick.Stop()
	for {
		select {
		case <-c.closed:
			return
		case <-tick.C:
		}
		c.mu.Lock()
		if c.streak == 0 {
			c.watching = false
			c.mu.Unlock()
			return
		}
		sc := c.consumer
		due := (c.failures > 0 || c.hung()) && !c.reopening && time.Since(c.lastReopen) >= reopenReachable
		if due {
			c.reopening = true
		}
		c.mu.Unlock()
		if !due {
			continue
		}
		if !c.serving() {
			c.mu.Lock()
			c.reopening = false
			c.mu.Unlock()
			continue
		}
		_ = c.replace(sc, "receives failing or hung, a broker serving the topic again")
	}
}
