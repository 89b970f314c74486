#!/usr/bin/env bash
# bench.sh: what `make bench` runs, inside with-services.sh. The kernel's
# benchmarks run in one process beside their two baselines (the bare broker
# pair and the PostgreSQL-only stage transaction), then the ratios are
# printed from that same run.
set -euo pipefail
cd "$(dirname "$0")/../.."
out=$(mktemp)
trap 'rm -f "$out"' EXIT

echo "== benchmarks (real PostgreSQL and RocketMQ proxy)"
go test -run='^$' -bench='Kernel|BareBroker|PostgresOnly' -benchtime=3x -count=1 -timeout 20m ./adapter/kernelbench/ | tee "$out"
go test -run='^$' -bench=. -benchtime=2s -count=1 ./shared/inbox/ | tee -a "$out"

echo "== side by side"
awk '
	function metric(unit,   i) { for (i = 3; i < NF; i++) if ($(i+1) == unit) return $i; return "" }
	/^BenchmarkKernel-[0-9]+ /        { kernel = metric("events/s") }
	/^BenchmarkKernelBatched-[0-9]+ / { batched = metric("events/s") }
	/^BenchmarkKernelPaced1000/       { p99 = metric("ack-p99-ms") }
	/^BenchmarkBareBroker/            { v = metric("events/s"); if (v + 0 > bare + 0) bare = v }
	/^BenchmarkPostgresOnly/          { v = metric("tx/s"); if (v + 0 > pg + 0) pg = v }
	END {
		printf "kernel           %8.0f events/s\n", kernel
		if (batched != "") printf "kernel, batched  %8.0f events/s\n", batched
		printf "bare broker pair %8.0f events/s   kernel/bare = %.2f (target >= 0.5)\n", bare, (bare > 0 ? kernel / bare : 0)
		printf "PostgreSQL only  %8.0f tx/s       kernel/pg   = %.2f (target >= 0.55)\n", pg, (pg > 0 ? kernel / pg : 0)
		if (p99 != "") printf "p99 commit->ACK at 1,000 events/s: %s ms (target <= 50)\n", p99
	}' "$out"
