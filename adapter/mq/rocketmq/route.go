package rocketmq

import (
	"context"
	"crypto/hmac"
	"crypto/sha1"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"

	rmqmd "github.com/apache/rocketmq-clients/golang/v5/metadata"
	"github.com/apache/rocketmq-clients/golang/v5/pkg/utils"
	v2 "github.com/apache/rocketmq-clients/golang/v5/protocol/v2"
	"github.com/google/uuid"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"

	"github.com/aivedio/pipeline/shared/config"
)

// ErrNoRoute is the proxy's answer for a topic it knows no route of
// (TOPIC_NOT_FOUND): the topic does not exist, or no broker serving it has
// registered with the name server yet.
var ErrNoRoute = errors.New("no route for the topic")

// QueryRoute asks a proxy of cfg.Endpoint for topic's route with one
// QueryRoute call and returns how many of its queues may be read. A proxy
// answers it only once it runs; it finds a route only once a broker
// serving the topic registered with the name server, which, after a
// restart, comes seconds after the proxy's port accepts. Before that a
// started client's receives hang, so this, not an open port, is what says
// a broker is serving again. Each address of a several-proxy endpoint is
// asked in turn until one answers OK.
//
// It stands in for starting a client to find out: client v5.1.4 never
// stops the client manager a started client creates (GracefulStop only
// unregisters the client), so every start, failed or not, leaves
// goroutines behind for good. The calls share one connection per proxy
// address for the life of the process.
func QueryRoute(ctx context.Context, cfg config.RocketMQ, topic string, timeout time.Duration) (readable int, err error) {
	endpoints, err := utils.ParseTarget(cfg.Endpoint)
	if err != nil {
		return 0, fmt.Errorf("parse ROCKETMQ_ENDPOINT %q: %w", cfg.Endpoint, err)
	}
	if len(endpoints.GetAddresses()) == 0 {
		return 0, fmt.Errorf("parse ROCKETMQ_ENDPOINT %q: no address", cfg.Endpoint)
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var errs []error
	for _, addr := range endpoints.GetAddresses() {
		n, err := queryRoute(ctx, cfg, endpoints, net.JoinHostPort(addr.GetHost(), strconv.Itoa(int(addr.GetPort()))), topic)
		if err == nil {
			return n, nil
		}
		errs = append(errs, err)
	}
	return 0, fmt.Errorf("query route of %s: %w", topic, errors.Join(errs...))
}

func queryRoute(ctx context.Context, cfg config.RocketMQ, endpoints *v2.Endpoints, addr, topic string) (int, error) {
	conn, err := routeConn(addr)
	if err != nil {
		return 0, err
	}
	resp, err := v2.NewMessagingServiceClient(conn).QueryRoute(sign(ctx, cfg),
		&v2.QueryRouteRequest{Topic: &v2.Resource{Name: topic}, Endpoints: endpoints})
	if err != nil {
		return 0, fmt.Errorf("%s: %w", addr, err)
	}
	switch code := resp.GetStatus().GetCode(); code {
	case v2.Code_OK:
	case v2.Code_TOPIC_NOT_FOUND:
		return 0, fmt.Errorf("%s: %w: %s", addr, ErrNoRoute, resp.GetStatus().GetMessage())
	case v2.Code_UNAUTHORIZED, v2.Code_FORBIDDEN:
		return 0, fmt.Errorf("%s: %w", addr, access(fmt.Errorf("CODE: %s, MESSAGE: %s", code, resp.GetStatus().GetMessage())))
	default:
		return 0, fmt.Errorf("%s: %s: %s", addr, code, resp.GetStatus().GetMessage())
	}
	readable := 0
	for _, q := range resp.GetMessageQueues() {
		switch q.GetPermission() {
		case v2.Permission_READ, v2.Permission_READ_WRITE:
			readable++
		}
	}
	return readable, nil
}

// routeConn returns the process's connection to addr for route queries
// and ACKs (see [acks]).
// It reconnects within a second of a proxy coming back: gRPC's default
// reconnect backoff grows to two minutes while a proxy is away, which
// would hide its return exactly when it matters.
func routeConn(addr string) (*grpc.ClientConn, error) {
	routeConns.mu.Lock()
	defer routeConns.mu.Unlock()
	if conn, ok := routeConns.byAddr[addr]; ok {
		return conn, nil
	}
	// The same transport as the client's default: TLS without verification,
	// which the proxy's self-signed certificate needs.
	conn, err := grpc.NewClient(addr,
		grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{InsecureSkipVerify: true})),
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second},
			MinConnectTimeout: 2 * time.Second,
		}))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", addr, err)
	}
	if routeConns.byAddr == nil {
		routeConns.byAddr = map[string]*grpc.ClientConn{}
	}
	routeConns.byAddr[addr] = conn
	return conn, nil
}

var routeConns struct {
	mu     sync.Mutex
	byAddr map[string]*grpc.ClientConn
}

// sign adds the headers the proxy reads from every client request, and the
// ACL signature when credentials are set, as the client does.
func sign(ctx context.Context, cfg config.RocketMQ) context.Context {
	return signAs(ctx, cfg, utils.GenClientID())
}

// signAs signs a request of the client clientID.
func signAs(ctx context.Context, cfg config.RocketMQ, clientID string) context.Context {
	now := time.Now().UTC().Format("20060102T150405Z")
	kv := []string{
		rmqmd.LanguageKey, rmqmd.LanguageValue,
		rmqmd.ProtocolKey, rmqmd.ProtocolValue,
		rmqmd.VersionKey, rmqmd.VersionValue,
		rmqmd.RequestID, uuid.NewString(),
		rmqmd.ClintID, clientID,
		rmqmd.DateTime, now,
	}
	if cfg.AccessKey != "" {
		mac := hmac.New(sha1.New, []byte(cfg.SecretKey))
		mac.Write([]byte(now))
		kv = append(kv, rmqmd.Authorization, fmt.Sprintf("%s %s=%s/%s/%s, %s=%s, %s=%s",
			rmqmd.EncryptHeader, rmqmd.Credential, cfg.AccessKey, "", rmqmd.Rocketmq,
			rmqmd.SignedHeaders, rmqmd.DateTime, rmqmd.Signature, hex.EncodeToString(mac.Sum(nil))))
	}
	return metadata.AppendToOutgoingContext(ctx, kv...)
}
