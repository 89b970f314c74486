package dlq

import (
	"context"
	"crypto/hmac"
	"crypto/sha1"
	"crypto/tls"
	"encoding/hex"
	"fmt"
	"net"
	"strconv"
	"time"

	rmqmd "github.com/apache/rocketmq-clients/golang/v5/metadata"
	"github.com/apache/rocketmq-clients/golang/v5/pkg/utils"
	v2 "github.com/apache/rocketmq-clients/golang/v5/protocol/v2"
	"github.com/google/uuid"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"

	"github.com/aivedio/pipeline/shared/config"
)

// probeTimeout bounds one route query.
const probeTimeout = 10 * time.Second

// topicExists asks the proxy for topic's route with one QueryRoute call on a
// connection of its own, closed again afterwards.
//
// It stands in for starting a consumer to find out: client v5.1.4 never
// stops the client manager a started client creates (GracefulStop only
// unregisters the client), so every start, failed or not, leaves four
// goroutines behind for good and a gRPC connection until it idles out. Run
// looks for a missing dead-letter topic every TopicPoll, on groups that may
// never have a dead letter; starting a consumer each time would leak
// without bound.
func topicExists(ctx context.Context, cfg config.RocketMQ, topic string) (bool, error) {
	endpoints, err := utils.ParseTarget(cfg.Endpoint)
	if err != nil {
		return false, fmt.Errorf("parse ROCKETMQ_ENDPOINT %q: %w", cfg.Endpoint, err)
	}
	if len(endpoints.GetAddresses()) == 0 {
		return false, fmt.Errorf("parse ROCKETMQ_ENDPOINT %q: no address", cfg.Endpoint)
	}
	addr := endpoints.GetAddresses()[0]
	// The same transport as the client's default: TLS without verification,
	// which the proxy's self-signed certificate needs.
	conn, err := grpc.NewClient(net.JoinHostPort(addr.GetHost(), strconv.Itoa(int(addr.GetPort()))),
		grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{InsecureSkipVerify: true})))
	if err != nil {
		return false, fmt.Errorf("query route of %s: %w", topic, err)
	}
	defer func() { _ = conn.Close() }()

	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	resp, err := v2.NewMessagingServiceClient(conn).QueryRoute(sign(ctx, cfg),
		&v2.QueryRouteRequest{Topic: &v2.Resource{Name: topic}, Endpoints: endpoints})
	if err != nil {
		return false, fmt.Errorf("query route of %s: %w", topic, err)
	}
	switch code := resp.GetStatus().GetCode(); code {
	case v2.Code_OK:
		return true, nil
	case v2.Code_TOPIC_NOT_FOUND:
		return false, nil
	default:
		return false, fmt.Errorf("query route of %s: %s: %s", topic, code, resp.GetStatus().GetMessage())
	}
}

// sign adds the headers the proxy reads from every client request, and the
// ACL signature when credentials are set, as the client does.
func sign(ctx context.Context, cfg config.RocketMQ) context.Context {
	now := time.Now().UTC().Format("20060102T150405Z")
	kv := []string{
		rmqmd.LanguageKey, rmqmd.LanguageValue,
		rmqmd.ProtocolKey, rmqmd.ProtocolValue,
		rmqmd.VersionKey, rmqmd.VersionValue,
		rmqmd.RequestID, uuid.NewString(),
		rmqmd.ClintID, utils.GenClientID(),
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
