package rocketmq

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"

	rmq "github.com/apache/rocketmq-clients/golang/v5"
	"github.com/apache/rocketmq-clients/golang/v5/pkg/utils"
	v2 "github.com/apache/rocketmq-clients/golang/v5/protocol/v2"

	"github.com/aivedio/pipeline/shared/config"
)

// acks settles the messages of one consumer group with AckMessage calls of
// several entries each. The v5.1.4 client makes one call per message, and
// on a busy consumer those calls are a large share of its CPU and of the
// proxy's. Each ACK still waits for the proxy's answer about its own
// message: a call carries what queued up while the calls before it were on
// their way, so a lone ACK goes out at once and a busy consumer's ACKs
// share calls. At most maxAckCalls are in flight.
//
// The calls go by receipt handle, on the process's own connection to the
// proxy (see [routeConn]); no client state is involved, so an ACK goes
// through while the consumer's client is being replaced. Unlike the
// client's Ack, which in v5.1.4 returns nil whatever the proxy's status, an
// entry the proxy refuses (an expired receipt handle) is an error.
type acks struct {
	cfg      config.RocketMQ
	group    string
	addrs    []string // the proxy addresses of cfg.Endpoint, tried in turn
	clientID string   // one per consumer, as a client has one

	mu     sync.Mutex
	queue  []*ackEntry
	flying int // senders running, each with at most one call in flight
}

func newAcks(cfg config.RocketMQ, group string) (*acks, error) {
	endpoints, err := utils.ParseTarget(cfg.Endpoint)
	if err != nil {
		return nil, fmt.Errorf("parse ROCKETMQ_ENDPOINT %q: %w", cfg.Endpoint, err)
	}
	a := &acks{cfg: cfg, group: group, clientID: utils.GenClientID()}
	for _, addr := range endpoints.GetAddresses() {
		a.addrs = append(a.addrs, net.JoinHostPort(addr.GetHost(), strconv.Itoa(int(addr.GetPort()))))
	}
	if len(a.addrs) == 0 {
		return nil, fmt.Errorf("parse ROCKETMQ_ENDPOINT %q: no address", cfg.Endpoint)
	}
	return a, nil
}

// ackEntry is one message waiting to be acknowledged.
type ackEntry struct {
	topic, id, handle string
	done              chan error // buffered: the sender never waits on it
}

const (
	// maxAckCalls bounds the AckMessage calls in flight per consumer.
	maxAckCalls = 2
	// maxAckEntries bounds the entries of one call, as the proxy bounds a
	// receive's batch.
	maxAckEntries = 32
	// ackTimeout bounds one call, as the client's request timeout bounds
	// its own.
	ackTimeout = 3 * time.Second
)

// ack acknowledges the message received with handle and waits for the
// proxy's answer, or for ctx. An ack that returns ctx's error is still
// sent, and may take effect.
func (a *acks) ack(ctx context.Context, topic, id, handle string) error {
	e := &ackEntry{topic: topic, id: id, handle: handle, done: make(chan error, 1)}
	a.mu.Lock()
	a.queue = append(a.queue, e)
	start := a.flying < maxAckCalls
	if start {
		a.flying++
	}
	a.mu.Unlock()
	if start {
		go a.send()
	}
	select {
	case err := <-e.done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// send makes calls until the queue is empty.
func (a *acks) send() {
	for {
		batch := a.next()
		if batch == nil {
			return
		}
		errs := a.call(batch)
		for i, e := range batch {
			e.done <- errs[i]
		}
	}
}

// next takes the next call's entries off the queue: up to maxAckEntries of
// the first entry's topic (a call names one topic). With none left it
// counts the sender out and returns nil.
func (a *acks) next() []*ackEntry {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.queue) == 0 {
		a.flying--
		a.queue = nil // let the backing array go after a burst
		return nil
	}
	topic := a.queue[0].topic
	batch := make([]*ackEntry, 0, min(len(a.queue), maxAckEntries))
	rest := a.queue[:0]
	for _, e := range a.queue {
		if e.topic == topic && len(batch) < maxAckEntries {
			batch = append(batch, e)
		} else {
			rest = append(rest, e)
		}
	}
	clear(a.queue[len(rest):])
	a.queue = rest
	return batch
}

// call sends one AckMessage call and returns each entry's outcome.
func (a *acks) call(batch []*ackEntry) []error {
	ctx, cancel := context.WithTimeout(context.Background(), ackTimeout)
	defer cancel()
	req := &v2.AckMessageRequest{
		Group:   &v2.Resource{Name: a.group},
		Topic:   &v2.Resource{Name: batch[0].topic},
		Entries: make([]*v2.AckMessageEntry, len(batch)),
	}
	for i, e := range batch {
		req.Entries[i] = &v2.AckMessageEntry{MessageId: e.id, ReceiptHandle: e.handle}
	}
	errs := make([]error, len(batch))
	resp, err := a.ackCall(ctx, req)
	if err != nil {
		for i := range errs {
			errs[i] = err
		}
		return errs
	}
	// The call's status speaks for every entry, unless the proxy answered
	// entry by entry (MULTIPLE_RESULTS): then each entry's own status does,
	// and an entry it left out is not known to be acknowledged.
	status := resp.GetStatus()
	byHandle := make(map[string]*v2.Status, len(resp.GetEntries()))
	for _, r := range resp.GetEntries() {
		byHandle[r.GetReceiptHandle()] = r.GetStatus()
	}
	for i, e := range batch {
		st := byHandle[e.handle]
		switch {
		case st != nil:
			errs[i] = statusError(st)
		case status.GetCode() == v2.Code_MULTIPLE_RESULTS:
			errs[i] = &rmq.ErrRpcStatus{Code: int32(v2.Code_INTERNAL_SERVER_ERROR), Message: "the proxy's answer left out message " + e.id}
		default:
			errs[i] = statusError(status)
		}
	}
	return errs
}

// statusError is the proxy's status as the client reports it; nil for OK.
func statusError(st *v2.Status) error {
	switch {
	case st == nil:
		return &rmq.ErrRpcStatus{Code: int32(v2.Code_INTERNAL_SERVER_ERROR), Message: "status was not set by the proxy"}
	case st.GetCode() == v2.Code_OK:
		return nil
	}
	return &rmq.ErrRpcStatus{Code: int32(st.GetCode()), Message: st.GetMessage()}
}

// ackCall sends req to the proxy, trying each address until one answers.
func (a *acks) ackCall(ctx context.Context, req *v2.AckMessageRequest) (*v2.AckMessageResponse, error) {
	var errs []error
	for _, addr := range a.addrs {
		conn, err := routeConn(addr)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		resp, err := v2.NewMessagingServiceClient(conn).AckMessage(signAs(ctx, a.cfg, a.clientID), req)
		if err == nil {
			return resp, nil
		}
		errs = append(errs, fmt.Errorf("%s: %w", addr, err))
		if ctx.Err() != nil {
			break
		}
	}
	return nil, errors.Join(errs...)
}
