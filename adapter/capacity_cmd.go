package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/aivedio/pipeline/shared/capacity"
	"github.com/aivedio/pipeline/shared/config"
)

const capacityUsage = `usage: adapter capacity <subcommand> [flags] [--json]   (seed 7.13.1-7.13.4)
  rate --task-rate 30 --fanout 20                  broker messages/s: Σ task rate × fan-out (comma-separated lists for several task classes)
  consumers --concurrency 40 --service-time 20s --utilization 0.7 --arrival 14
                                                   throughput of one instance and the instances the arrival rate needs
  drain --backlog 1000000 --consume 900 --arrival 600
                                                   time to drain a backlog at the net rate (refused when consumption does not exceed arrival)
  storage --rate 160 --message-bytes 2048 --retention 72h --replicas 3 --overhead 1.3
                                                   logical and physical broker bytes
  live --prometheus http://prometheus:9090 [--window 1h] [--workers 16] [--utilization 0.7]
                                                   measured fan-out, per-stage load, the stage that saturates first
                                                   and at what request rate, and the drain time of the broker's backlog`

// runCapacity serves `adapter capacity`: the seed's capacity arithmetic,
// as text or (--json) one JSON object.
func runCapacity(args []string, out io.Writer) error {
	if len(args) == 0 {
		return errors.New(capacityUsage)
	}
	fs := flag.NewFlagSet("capacity "+args[0], flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	asJSON := fs.Bool("json", false, "print one JSON object")
	var compute func() (any, string, error)
	switch args[0] {
	case "rate":
		rates := fs.String("task-rate", "", "tasks/s arriving (a comma-separated list for several task classes)")
		fanouts := fs.String("fanout", "", "broker messages per task (one per --task-rate)")
		compute = func() (any, string, error) {
			classes, err := taskClasses(*rates, *fanouts)
			if err != nil {
				return nil, "", err
			}
			rate, err := capacity.MessageRate(classes...)
			if err != nil {
				return nil, "", err
			}
			return map[string]any{"message_rate": rate},
				fmt.Sprintf("message rate: %s msg/s (Σ task rate × fan-out over %d task class(es))", num(rate), len(classes)), nil
		}
	case "consumers":
		concurrency := fs.Int("concurrency", 0, "work in flight per instance")
		service := fs.Duration("service-time", 0, "mean time of one unit of work (20s)")
		utilization := fs.Float64("utilization", 0.7, "share of the ideal rate an instance reaches, (0, 1]")
		arrival := fs.Float64("arrival", 0, "units/s arriving at peak")
		compute = func() (any, string, error) {
			c := capacity.Consumers{Concurrency: *concurrency, ServiceTime: *service, Utilization: *utilization, Arrival: *arrival}
			p, err := c.Plan()
			if err != nil {
				return nil, "", err
			}
			return map[string]any{"per_instance": p.PerInstance, "instances": p.Instances},
				fmt.Sprintf("per-instance throughput: %s task/s (%d / %s × %s)\ninstances needed: %d for %s task/s, before headroom for failures and bursts",
					num(p.PerInstance), c.Concurrency, c.ServiceTime, num(c.Utilization), p.Instances, num(c.Arrival)), nil
		}
	case "drain":
		backlog := fs.Float64("backlog", 0, "messages waiting")
		consume := fs.Float64("consume", 0, "msg/s the consumers take once recovered")
		arrival := fs.Float64("arrival", 0, "msg/s still arriving")
		compute = func() (any, string, error) {
			d, err := capacity.DrainTime(*backlog, *consume, *arrival)
			if err != nil {
				return nil, "", err
			}
			return map[string]any{"drain_seconds": d.Seconds()},
				fmt.Sprintf("drain time: %s s (%.1f min) = %s / (%s - %s msg/s)", num(d.Seconds()), d.Minutes(), num(*backlog), num(*consume), num(*arrival)), nil
		}
	case "storage":
		rate := fs.Float64("rate", 0, "mean msg/s")
		size := fs.Float64("message-bytes", 0, "mean message size in bytes")
		retention := fs.Duration("retention", 0, "how long the broker keeps messages (72h)")
		replicas := fs.Float64("replicas", 1, "copies stored")
		overhead := fs.Float64("overhead", 1, "index, file and safety factor (>= 1)")
		compute = func() (any, string, error) {
			logical, physical, err := capacity.Storage{Rate: *rate, MessageBytes: *size, Retention: *retention, Replicas: *replicas, Overhead: *overhead}.Bytes()
			if err != nil {
				return nil, "", err
			}
			return map[string]any{"logical_bytes": logical, "physical_bytes": physical},
				fmt.Sprintf("logical: %.1f GiB (%s msg/s × %s B × %s)\nphysical: %.1f GiB (× %s replicas × %s overhead); keep the disk below its watermark on top",
					logical/capacity.GiB, num(*rate), num(*size), *retention, physical/capacity.GiB, num(*replicas), num(*overhead)), nil
		}
	case "live":
		var p liveParams
		fs.StringVar(&p.Prometheus, "prometheus", "", "URL of the Prometheus that scrapes the pipeline and the broker")
		fs.DurationVar(&p.Window, "window", time.Hour, "the window rates are measured over")
		fs.IntVar(&p.Workers, "workers", config.DefaultSourceWorkers, "deliveries in flight per stage replica (SOURCE_WORKERS)")
		fs.Float64Var(&p.Utilization, "utilization", 0.7, "share of the ideal rate a replica reaches, (0, 1]")
		compute = func() (any, string, error) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			rep, err := measureLive(ctx, p)
			if err != nil {
				return nil, "", err
			}
			return rep, rep.text(), nil
		}
	default:
		return fmt.Errorf("unknown capacity subcommand %q\n%s", args[0], capacityUsage)
	}
	if err := fs.Parse(args[1:]); err != nil {
		return fmt.Errorf("%w\n%s", err, capacityUsage)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q\n%s", fs.Arg(0), capacityUsage)
	}
	v, text, err := compute()
	if err != nil {
		return fmt.Errorf("capacity %s: %w", args[0], err)
	}
	if *asJSON {
		return json.NewEncoder(out).Encode(v)
	}
	_, err = fmt.Fprintln(out, text)
	return err
}

// taskClasses pairs comma-separated task rates with their fan-outs.
func taskClasses(rates, fanouts string) ([]capacity.Class, error) {
	if rates == "" || fanouts == "" {
		return nil, errors.New("--task-rate and --fanout are required")
	}
	r, f := strings.Split(rates, ","), strings.Split(fanouts, ",")
	if len(r) != len(f) {
		return nil, fmt.Errorf("%d task rates but %d fan-outs: give one fan-out per task rate", len(r), len(f))
	}
	classes := make([]capacity.Class, len(r))
	for i := range r {
		var err error
		if classes[i].TaskRate, err = strconv.ParseFloat(strings.TrimSpace(r[i]), 64); err != nil {
			return nil, fmt.Errorf("--task-rate %q: not a number", r[i])
		}
		if classes[i].Fanout, err = strconv.ParseFloat(strings.TrimSpace(f[i]), 64); err != nil {
			return nil, fmt.Errorf("--fanout %q: not a number", f[i])
		}
	}
	return classes, nil
}

// num prints a figure with thousands separators and at most one decimal.
func num(v float64) string {
	s := strconv.FormatFloat(v, 'f', 1, 64)
	s = strings.TrimSuffix(s, ".0")
	whole, frac, _ := strings.Cut(s, ".")
	neg := strings.HasPrefix(whole, "-")
	whole = strings.TrimPrefix(whole, "-")
	var b strings.Builder
	for i, r := range whole {
		if i > 0 && (len(whole)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(r)
	}
	out := b.String()
	if frac != "" {
		out += "." + frac
	}
	if neg {
		out = "-" + out
	}
	return out
}
