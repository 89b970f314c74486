package rocketmq

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"math/big"
	"net"
	"sync"
	"testing"
	"time"

	rmq "github.com/apache/rocketmq-clients/golang/v5"
	v2 "github.com/apache/rocketmq-clients/golang/v5/protocol/v2"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/aivedio/pipeline/shared/config"
)

// fakeProxy answers AckMessage calls, entry by entry, and records them.
// Every call waits for hold to close before it answers.
type fakeProxy struct {
	v2.UnimplementedMessagingServiceServer
	hold chan struct{}

	mu      sync.Mutex
	arrived int            // entries of the calls that arrived
	calls   [][]string     // receipt handles, per answered call
	acked   map[string]int // calls per receipt handle
	refused map[string]bool
}

func (p *fakeProxy) AckMessage(_ context.Context, req *v2.AckMessageRequest) (*v2.AckMessageResponse, error) {
	p.mu.Lock()
	p.arrived += len(req.GetEntries())
	p.mu.Unlock()
	<-p.hold
	p.mu.Lock()
	defer p.mu.Unlock()
	resp := &v2.AckMessageResponse{Status: &v2.Status{Code: v2.Code_MULTIPLE_RESULTS}}
	var handles []string
	for _, e := range req.GetEntries() {
		handles = append(handles, e.GetReceiptHandle())
		p.acked[e.GetReceiptHandle()]++
		code := v2.Code_OK
		if p.refused[e.GetReceiptHandle()] {
			code = v2.Code_INVALID_RECEIPT_HANDLE
		}
		resp.Entries = append(resp.Entries, &v2.AckMessageResultEntry{
			MessageId: e.GetMessageId(), ReceiptHandle: e.GetReceiptHandle(), Status: &v2.Status{Code: code, Message: code.String()},
		})
	}
	p.calls = append(p.calls, handles)
	return resp, nil
}

// startFakeProxy serves p over TLS with a self-signed certificate, as the
// proxy does, and returns a config pointing at it.
func startFakeProxy(t *testing.T, p *fakeProxy) config.RocketMQ {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "fake proxy"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	cert := tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := grpc.NewServer(grpc.Creds(credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{cert}})))
	v2.RegisterMessagingServiceServer(srv, p)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return config.RocketMQ{Endpoint: lis.Addr().String()}
}

// TestAcksShareCalls: ACKs that wait while a call is in flight go out
// together in the next calls; each message is acknowledged exactly once,
// and each Ack returns only once the proxy answered for its message, with
// its own entry's outcome.
func TestAcksShareCalls(t *testing.T) {
	t.Parallel()
	p := &fakeProxy{hold: make(chan struct{}), acked: map[string]int{}, refused: map[string]bool{"h7": true}}
	a, err := newAcks(startFakeProxy(t, p), "g")
	require.NoError(t, err)
	ctx := t.Context()

	const n = 40
	type result struct {
		handle string
		err    error
	}
	results := make(chan result, n)
	ack := func(i int) {
		h := fmt.Sprintf("h%d", i)
		results <- result{h, a.ack(ctx, "t", fmt.Sprintf("m%d", i), h)}
	}
	for i := range n {
		go ack(i)
	}
	// The calls in flight are held: every other ACK queues behind them.
	require.Eventually(t, func() bool {
		a.mu.Lock()
		queued, flying := len(a.queue), a.flying
		a.mu.Unlock()
		p.mu.Lock()
		defer p.mu.Unlock()
		return flying == maxAckCalls && queued+p.arrived == n
	}, 5*time.Second, time.Millisecond, "the ACKs queue behind the held calls")
	select {
	case r := <-results:
		t.Fatalf("Ack of %s returned before the proxy answered it: %v", r.handle, r.err)
	default:
	}
	close(p.hold)

	for range n {
		r := <-results
		if r.handle == "h7" {
			var status *rmq.ErrRpcStatus
			require.ErrorAs(t, r.err, &status, "a refused entry fails its own Ack")
			require.Equal(t, int32(v2.Code_INVALID_RECEIPT_HANDLE), status.GetCode())
			continue
		}
		require.NoError(t, r.err, r.handle)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	require.Len(t, p.acked, n)
	for h, calls := range p.acked {
		require.Equal(t, 1, calls, "%s acknowledged once", h)
	}
	require.LessOrEqual(t, len(p.calls), 1+(n-1+maxAckEntries-1)/maxAckEntries+maxAckCalls, "the queued ACKs share calls: %v", p.calls)
	for _, c := range p.calls {
		require.LessOrEqual(t, len(c), maxAckEntries)
	}
}

// TestAcksCallFails: a call that fails fails every Ack it carried, and
// the next Ack goes out in a call of its own.
func TestAcksCallFails(t *testing.T) {
	t.Parallel()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := lis.Addr().String()
	require.NoError(t, lis.Close()) // nothing listens there
	a, err := newAcks(config.RocketMQ{Endpoint: addr}, "g")
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	require.Error(t, a.ack(ctx, "t", "m1", "h1"))
	a.mu.Lock()
	defer a.mu.Unlock()
	require.Empty(t, a.queue)
}
