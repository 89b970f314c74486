// Package mqtest is the conformance suite of the broker interface (package
// mq): one set of tests that the in-process emulator (package mq/memmq) and
// the RocketMQ 5 client (package mq/rocketmq) against a real proxy must both
// pass, so that code tested on the emulator behaves the same on RocketMQ.
//
// # What it holds a broker to
//
//   - Send/Receive round trip keeps topic, tag, keys, properties (a broker may
//     add its own), body, message group and delivery time.
//   - Every consumer group gets every message of its topics that its tag
//     expression ("*" or "A||B") accepts.
//   - Ack settles a message; a message not acked within its invisible duration
//     is delivered again with the same MessageID and DeliveryAttempt+1, and
//     so is one whose invisible duration was changed, after the new duration.
//     ChangeInvisibleDuration with the handle of an expired delivery fails; an
//     Ack with it settles nothing (RocketMQ answers such an Ack with success,
//     the emulator with an error).
//   - After the group's MaxDeliveryAttempts a message goes to the topic
//     "%DLQ%<group>", which exists from then on and which a dead-letter
//     drain group can read; the copy keeps MessageID, tag, keys, properties
//     and body, and its DeliveryAttempt continues the count.
//   - A DELAY message is not delivered before its DeliveryTime.
//   - On a FIFO topic an orderly group gets each message group's messages in
//     send order. One Receive may return several of them, in order, but no
//     later Receive returns the next one while an earlier one is unsettled;
//     meanwhile other message groups keep flowing (on RocketMQ: those hashed to
//     other queues, as a queue is held back as a whole).
//   - A message whose kind does not match its topic's type, an empty body and
//     an unknown topic are refused; so is an invisible duration below the
//     broker's minimum, and a consumer of an unknown topic.
//   - Receive with nothing to deliver returns an empty slice after its await.
//
// Run creates every topic and group it needs through one call of the
// harness factory, with names unique to the run, and runs its cases as
// parallel subtests.
package mqtest

import (
	"crypto/rand"
	"encoding/hex"
	"testing"
	"time"

	"github.com/aivedio/pipeline/adapter/mq"
	"github.com/aivedio/pipeline/shared/catalog"
)

// Harness is one broker under test.
type Harness struct {
	Producer mq.Producer
	// ConsumerFunc opens a consumer of group (a broker name) that reads
	// filters (broker topic name -> tag expression) and long-polls for
	// Timing.Await; it closes the consumer when t ends. It returns the
	// broker's error for an unknown topic.
	ConsumerFunc func(t *testing.T, group string, filters map[string]string) (mq.Consumer, error)
	Timing       Timing
}

// Timing is how fast the broker under test works; the suite scales its
// waits by it.
type Timing struct {
	// MinInvisible is the shortest invisible duration Receive accepts (10 s
	// on RocketMQ). The suite uses it as its invisible duration, and a tenth
	// of it as the short ChangeInvisibleDuration that triggers a redelivery.
	MinInvisible time.Duration
	// Await is the consumers' long poll: an empty Receive takes at least
	// this long.
	Await time.Duration
	// Lag bounds how late the broker may be: redeliveries after their
	// invisible duration, delayed messages after their time, an empty
	// Receive after its await.
	Lag time.Duration
	// Early bounds how early a delayed message may come (timer precision).
	Early time.Duration
}

// NewHarnessFunc creates topics and groups on a broker and returns a
// harness for it. Names are used as given: they are broker-legal.
type NewHarnessFunc func(t *testing.T, topics []catalog.Topic, groups []catalog.Group) Harness

// Run runs the conformance suite. Its subtests are parallel, so Run returns
// before they finish: release what the harness holds with t.Cleanup.
func Run(t *testing.T, newHarness NewHarnessFunc) {
	s := newSuite()
	s.h = newHarness(t, s.topics(), s.groups())
	for _, c := range cases() {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.run(t, s)
		})
	}
}

type testCase struct {
	name string
	run  func(t *testing.T, s *suite)
}

func cases() []testCase {
	return []testCase{
		{"RoundTrip", testRoundTrip},
		{"TagFilter", testTagFilter},
		{"EveryGroupGetsEveryMessage", testEveryGroup},
		{"UnackedIsRedeliveredAckedIsNot", testRedelivery},
		{"ChangeInvisibleDuration", testChangeInvisibleDuration},
		{"DeadLetter", testDeadLetter},
		{"DelayNotBeforeItsTime", testDelay},
		{"FIFOOrderPerMessageGroup", testFIFO},
		{"WrongMessageKindRefused", testWrongKind},
		{"EmptyReceiveWaitsAwait", testEmptyReceive},
		{"InvisibleBelowMinimumRefused", testInvisibleBelowMinimum},
		{"ConsumerOfUnknownTopicRefused", testUnknownTopicConsumer},
	}
}

// suite names the run's topics and groups.
type suite struct {
	h      Harness
	prefix string // unique to the run; every key the suite sends starts with it

	normal, delay, fifo catalog.Topic
	// one group per case, so that cases never take each other's messages
	roundTrip, tagsAB, tagsC, fanA, fanB, expiry, change, dead, drain, delayed, ordered, idle catalog.Group
}

// deadMaxAttempts is the dead-letter case's group's MaxDeliveryAttempts.
const deadMaxAttempts = 2

func newSuite() *suite {
	var b [4]byte
	_, _ = rand.Read(b[:])
	p := "mqt_" + hex.EncodeToString(b[:])
	topic := func(name string, typ catalog.MessageType) catalog.Topic {
		return catalog.Topic{Name: p + "_" + name, Logical: p + "_" + name, Type: typ}
	}
	group := func(name string, maxAttempts int, orderly bool) catalog.Group {
		return catalog.Group{Name: p + "_" + name, Stage: "mqtest", MaxDeliveryAttempts: maxAttempts, Orderly: orderly}
	}
	return &suite{
		prefix:    p,
		normal:    topic("normal", catalog.Normal),
		delay:     topic("delay", catalog.Delay),
		fifo:      topic("fifo", catalog.FIFO),
		roundTrip: group("roundtrip", 16, false),
		tagsAB:    group("tags_ab", 16, false),
		tagsC:     group("tags_c", 16, false),
		fanA:      group("fan_a", 16, false),
		fanB:      group("fan_b", 16, false),
		expiry:    group("expiry", 16, false),
		change:    group("change", 16, false),
		dead:      group("dead", deadMaxAttempts, false),
		// The drain group reads dead letters, whose attempt count goes on from
		// where their group stopped: a smaller maximum would move them on to
		// the drain group's own dead-letter topic at once.
		drain:   group("drain", 100, false),
		delayed: group("delayed", 16, false),
		ordered: group("ordered", 16, true),
		idle:    group("idle", 16, false),
	}
}

func (s *suite) topics() []catalog.Topic { return []catalog.Topic{s.normal, s.delay, s.fifo} }

func (s *suite) groups() []catalog.Group {
	return []catalog.Group{s.roundTrip, s.tagsAB, s.tagsC, s.fanA, s.fanB, s.expiry, s.change,
		s.dead, s.drain, s.delayed, s.ordered, s.idle}
}
