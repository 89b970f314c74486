package memmq

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/aivedio/pipeline/shared/catalog"
)

// Errors callers can branch on; every error of this package that is about
// one of these wraps it.
var (
	// ErrDown is returned by every call while [Broker.SetDown] simulates an outage.
	ErrDown = errors.New("memmq: broker is down")
	// ErrUnknownTopic is returned for a topic that was never created.
	ErrUnknownTopic = errors.New("memmq: unknown topic")
	// ErrUnknownGroup is returned for a consumer group that was never created.
	ErrUnknownGroup = errors.New("memmq: unknown consumer group")
	// ErrMessageType is returned when a message's kind does not match its topic's type.
	ErrMessageType = errors.New("memmq: current message type not match with topic accept message types")
	// ErrInvalidHandle is returned by Ack and ChangeInvisibleDuration for a
	// delivery that expired, was settled, or was replaced.
	ErrInvalidHandle = errors.New("memmq: invalid receipt handle")
)

// Defaults of [Opts].
const (
	DefaultMinInvisible        = 10 * time.Second
	DefaultQueuesPerTopic      = 8
	DefaultMaxDelay            = 24 * time.Hour
	DefaultRetain              = 10000
	DefaultMaxDeliveryAttempts = 16
	// MaxBodySize is the largest body Send takes, the proxy's default.
	MaxBodySize = 4 << 20
)

// dlqPrefix starts the name of every dead-letter topic, as on RocketMQ.
const dlqPrefix = "%DLQ%"

// Opts are the optional knobs of [New]; a nil *Opts takes every default.
type Opts struct {
	// NowFunc is the broker's clock for delivery times and invisibility;
	// time.Now when nil. Tests pass a fake clock.
	NowFunc func() time.Time
	// MinInvisible is the shortest invisible duration Receive accepts;
	// DefaultMinInvisible (10 s, the proxy's minimum) when zero.
	MinInvisible time.Duration
	// QueuesPerTopic is the number of queues of a FIFO topic;
	// DefaultQueuesPerTopic when zero.
	QueuesPerTopic int
	// MaxDelay bounds how far ahead a DeliveryTime may be; DefaultMaxDelay
	// (the proxy's 1 day) when zero.
	MaxDelay time.Duration
	// Retain is how many messages a topic keeps for groups that subscribe to
	// it later; DefaultRetain when zero.
	Retain int
}

// Broker is an in-memory RocketMQ 5 broker. It is safe for concurrent use and
// starts no goroutines.
type Broker struct {
	now          func() time.Time
	minInvisible time.Duration
	queues       int
	maxDelay     time.Duration
	retain       int
	idPrefix     string

	mu      sync.Mutex
	j       *journal // nil: in memory only
	down    bool
	seq     uint64 // message sequence, also the tail of message ids
	tokens  uint64 // receipt handle tokens
	topics  map[string]*topic
	groups  map[string]*group
	changed chan struct{} // closed and replaced whenever waiting receivers should look again
}

// New returns an empty broker.
func New(opts *Opts) *Broker {
	if opts == nil {
		opts = &Opts{}
	}
	b := &Broker{
		now:          opts.NowFunc,
		minInvisible: opts.MinInvisible,
		queues:       opts.QueuesPerTopic,
		maxDelay:     opts.MaxDelay,
		retain:       opts.Retain,
		topics:       map[string]*topic{},
		groups:       map[string]*group{},
		changed:      make(chan struct{}),
	}
	if b.now == nil {
		b.now = time.Now
	}
	if b.minInvisible <= 0 {
		b.minInvisible = DefaultMinInvisible
	}
	if b.queues <= 0 {
		b.queues = DefaultQueuesPerTopic
	}
	if b.maxDelay <= 0 {
		b.maxDelay = DefaultMaxDelay
	}
	if b.retain <= 0 {
		b.retain = DefaultRetain
	}
	var raw [8]byte
	_, _ = rand.Read(raw[:])
	b.idPrefix = strings.ToUpper(hex.EncodeToString(raw[:]))
	return b
}

// CreateTopic creates the topic, or changes its type if it exists.
func (b *Broker) CreateTopic(name string, typ catalog.MessageType) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.createTopicLocked(name, typ)
	b.flushLogged()
}

func (b *Broker) createTopicLocked(name string, typ catalog.MessageType) {
	if t, ok := b.topics[name]; ok && t.typ == typ {
		return
	} else if ok {
		t.typ = typ
	} else {
		b.topics[name] = &topic{name: name, typ: typ}
	}
	b.journalLocked(record{T: &topicRecord{Name: name, Type: typ}})
}

// GroupConfig describes a consumer group.
type GroupConfig struct {
	Name string // broker name of the group
	// MaxDeliveryAttempts is how often a message is delivered before it goes
	// to the dead-letter topic; DefaultMaxDeliveryAttempts when zero.
	MaxDeliveryAttempts int
	// Orderly groups take a FIFO topic's queues one in-flight batch at a time.
	Orderly bool
}

// CreateGroup creates the consumer group, or updates it if it exists.
func (b *Broker) CreateGroup(cfg GroupConfig) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.createGroupLocked(cfg)
	b.flushLogged()
}

func (b *Broker) createGroupLocked(cfg GroupConfig) {
	maxAttempts := cfg.MaxDeliveryAttempts
	if maxAttempts <= 0 {
		maxAttempts = DefaultMaxDeliveryAttempts
	}
	if g, ok := b.groups[cfg.Name]; ok && g.maxAttempts == maxAttempts && g.orderly == cfg.Orderly {
		return
	} else if ok {
		g.maxAttempts, g.orderly = maxAttempts, cfg.Orderly
	} else {
		b.groups[cfg.Name] = &group{name: cfg.Name, maxAttempts: maxAttempts, orderly: cfg.Orderly, subs: map[string]*subscription{}}
	}
	b.journalLocked(record{G: &groupRecord{Name: cfg.Name, MaxAttempts: maxAttempts, Orderly: cfg.Orderly}})
}

// Apply creates the catalog's topics and groups under their broker names,
// as `adapter topics apply` does on RocketMQ.
func (b *Broker) Apply(topics []catalog.Topic, groups []catalog.Group) {
	for _, t := range topics {
		b.CreateTopic(t.BrokerName(), t.Type)
	}
	for _, g := range groups {
		b.CreateGroup(GroupConfig{Name: g.BrokerName(), MaxDeliveryAttempts: g.MaxDeliveryAttempts, Orderly: g.Orderly})
	}
}

// SetDown starts (true) or ends (false) a simulated outage: meanwhile every
// Send, Receive, Ack and ChangeInvisibleDuration fails with [ErrDown], and
// long-polling receivers return at once. Invisible durations keep running.
func (b *Broker) SetDown(down bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.down = down
	b.notifyLocked()
}

// Producer returns a producer that sends to this broker.
func (b *Broker) Producer() *Producer { return &Producer{b: b} }

// notifyLocked wakes every waiting receiver.
func (b *Broker) notifyLocked() {
	close(b.changed)
	b.changed = make(chan struct{})
}

func (b *Broker) checkUpLocked(op string) error {
	if b.down {
		return fmt.Errorf("%s: %w", op, ErrDown)
	}
	if b.j != nil && b.j.err != nil {
		return fmt.Errorf("%s: %w", op, b.j.err)
	}
	return nil
}

// topicLocked finds a topic.
func (b *Broker) topicLocked(name string) (*topic, error) {
	t, ok := b.topics[name]
	if !ok {
		return nil, fmt.Errorf("%w %q", ErrUnknownTopic, name)
	}
	return t, nil
}
