// Package stack runs the whole pipeline in one process, the way `go run
// ./local` and the end-to-end tests need it: every stage function served
// over real HTTP CloudEvents on a loopback port, a source adapter per
// consumer group delivering to it, and the outbox relay, all on whichever
// broker, database, Redis, object store and provider it is given.
//
// Nothing here is a shortcut around the production path: the functions,
// adapters and relay are the same packages the deployed binaries run; only
// the process boundaries are gone.
package stack

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/cloudevents/sdk-go/v2/event"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"
	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/aivedio/pipeline/adapter/dlq"
	"github.com/aivedio/pipeline/adapter/mq"
	"github.com/aivedio/pipeline/adapter/relay"
	"github.com/aivedio/pipeline/adapter/source"
	"github.com/aivedio/pipeline/functions"
	"github.com/aivedio/pipeline/functions/reconcile"
	"github.com/aivedio/pipeline/functions/stage"
	"github.com/aivedio/pipeline/shared/catalog"
	"github.com/aivedio/pipeline/shared/config"
	"github.com/aivedio/pipeline/shared/delivery"
)

// Broker opens the stack's producer and consumers.
type Broker interface {
	Producer() mq.Producer
	// Consumers opens one consumer per subscription of g.
	Consumers(g catalog.Group) ([]mq.Consumer, error)
	// DeadLetters opens, when asked, the consumer that drains g's
	// dead-letter topic as catalog.DLQDrain; nil: the stack drains none.
	DeadLetters(g catalog.Group) dlq.ConsumerFunc
}

// Params configures a Stack.
type Params struct {
	Deps   functions.Deps
	Broker Broker
	// Workers per consumer group, Invisible (the receive invisible
	// duration) and HandlerTimeout (the bound of one delivery): the source
	// adapter's defaults (config.DefaultSource*) when zero, as deployed.
	Workers        int
	Invisible      time.Duration
	HandlerTimeout time.Duration
	// RetryMin is the first redelivery backoff; 10 s (RocketMQ's minimum)
	// when zero. The emulator accepts shorter.
	RetryMin time.Duration
	// ScanEvery is how often the reconcile stage is sent its periodic scan
	// trigger, as a Knative PingSource does; 30 s when zero.
	ScanEvery time.Duration
	// Remote names stages whose function runs elsewhere, by the URL it
	// serves on: the stack runs their source adapters, delivering to that
	// URL, and not the function itself (a test's separate process it can
	// SIGKILL, as Knative kills a pod).
	Remote map[string]string
	// Registerer receives the sources' and the relay's metrics; nil
	// registers none.
	Registerer prometheus.Registerer
	Logger     *slog.Logger
}

// Stack is a running pipeline.
type Stack struct {
	p Params
	// URLs maps each stage to the loopback URL its function serves on.
	URLs map[string]string
}

// New checks p and fills defaults.
func New(p Params) (*Stack, error) {
	if p.Deps.Pool == nil || p.Broker == nil {
		return nil, errors.New("stack: Deps.Pool and Broker are required")
	}
	p.Workers = cmp.Or(max(p.Workers, 0), config.DefaultSourceWorkers)
	p.Invisible = cmp.Or(max(p.Invisible, 0), config.DefaultSourceInvisible)
	p.HandlerTimeout = cmp.Or(max(p.HandlerTimeout, 0), config.DefaultSourceHandlerTimeout)
	if p.RetryMin <= 0 {
		p.RetryMin = 10 * time.Second
	}
	if p.ScanEvery <= 0 {
		p.ScanEvery = 30 * time.Second
	}
	if p.Logger == nil {
		p.Logger = slog.New(slog.DiscardHandler)
	}
	if p.Deps.Logger == nil {
		p.Deps.Logger = p.Logger
	}
	return &Stack{p: p, URLs: map[string]string{}}, nil
}

// Run serves every built stage, its adapters and the relay until ctx ends.
// ready, when not nil, is called once every function listens.
func (s *Stack) Run(ctx context.Context, ready func()) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var wg sync.WaitGroup
	var servers []*http.Server
	defer func() {
		for _, srv := range servers {
			shut, done := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			_ = srv.Shutdown(shut)
			done()
		}
		wg.Wait()
	}()
	fail := func(err error) {
		if err != nil && !errors.Is(err, context.Canceled) {
			cancel(err)
		}
	}

	for _, name := range functions.Built() {
		if url, ok := s.p.Remote[name]; ok {
			s.URLs[name] = url
			continue
		}
		fn, err := functions.New(ctx, name, s.p.Deps)
		if err != nil {
			return err
		}
		srv, url, err := serveFunction(fn.Handle)
		if err != nil {
			return fmt.Errorf("serve %s: %w", name, err)
		}
		servers = append(servers, srv)
		s.URLs[name] = url
	}
	sourceMetrics := source.NewMetrics(s.p.Registerer)
	for _, g := range catalog.Groups() {
		url, ok := s.URLs[g.Stage]
		if !ok {
			continue
		}
		consumers, err := s.p.Broker.Consumers(g)
		if err != nil {
			return fmt.Errorf("consumers of %s: %w", g.Name, err)
		}
		src := source.New(source.Params{
			Group: g, Consumers: consumers, Quarantine: s.p.Deps.Pool,
			Deliverer: delivery.NewHTTP(url, s.p.Workers, s.p.HandlerTimeout/2),
			Workers:   s.p.Workers, Invisible: s.p.Invisible, HandlerTimeout: s.p.HandlerTimeout,
			RetryDelay: func(attempt int) time.Duration {
				return min(s.p.RetryMin<<min(attempt-1, 6), 10*time.Minute)
			},
			Metrics: sourceMetrics, Logger: s.p.Logger,
		})
		wg.Go(func() { fail(src.Run(ctx)) })
	}
	// Dead letters go to message_quarantine, as `adapter dlq drain` moves
	// them in a deployment: quarantine list, show and replay see them.
	dlqMetrics := dlq.NewMetrics(s.p.Registerer)
	for _, g := range catalog.Groups() {
		open := s.p.Broker.DeadLetters(g)
		if _, ok := s.URLs[g.Stage]; !ok || open == nil {
			continue
		}
		d := dlq.New(dlq.Params{Group: g, ConsumerFunc: open, DB: s.p.Deps.Pool, TopicPoll: 5 * time.Second,
			Metrics: dlqMetrics, Logger: s.p.Logger.With(slog.String("component", "dlq"), slog.String("group", g.Name))})
		wg.Go(func() {
			fail(d.Run(ctx))
			_ = d.Close()
		})
	}
	r := relay.New(relay.Params{Pool: s.p.Deps.Pool, Producer: s.p.Broker.Producer(), Owner: "local-stack",
		Poll: 500 * time.Millisecond, Metrics: relay.NewMetrics(s.p.Registerer), Logger: s.p.Logger.With(slog.String("component", "relay"))})
	wg.Go(func() { fail(r.Run(ctx)) })
	if url, ok := s.URLs[reconcile.Name]; ok {
		wg.Go(func() { s.tick(ctx, url) })
	}
	if ready != nil {
		ready()
	}
	<-ctx.Done()
	if err := context.Cause(ctx); !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

// tick posts the reconcile stage's scan trigger every ScanEvery, over the
// same HTTP CloudEvents path a Knative PingSource uses.
func (s *Stack) tick(ctx context.Context, url string) {
	client := &http.Client{Timeout: time.Minute}
	t := time.NewTicker(s.p.ScanEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		ev := event.New()
		ev.SetID(uuid.NewString())
		ev.SetType(reconcile.ScanEventType)
		ev.SetSource("/aivedio/local/ticker")
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, nil)
		if err == nil {
			err = cehttp.WriteRequest(ctx, binding.ToMessage(&ev), req)
		}
		var resp *http.Response
		if err == nil {
			resp, err = client.Do(req)
		}
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode >= 300 {
				err = fmt.Errorf("HTTP %d", resp.StatusCode)
			}
		}
		if err != nil && ctx.Err() == nil {
			s.p.Logger.WarnContext(ctx, "reconcile scan trigger failed", slog.String("error", err.Error()))
		}
	}
}

// serveFunction serves handle over HTTP CloudEvents on a loopback port, as
// func-go does in a deployment.
func serveFunction(handle stage.HandleFunc) (*http.Server, string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, "", err
	}
	srv := &http.Server{Handler: stage.HTTPHandler(handle), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	return srv, "http://" + ln.Addr().String(), nil
}
