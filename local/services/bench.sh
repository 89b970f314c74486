#!/usr/bin/env bash
# bench.sh: what `make bench` runs, inside with-services.sh. The kernel's
# benchmarks run in one process beside their two baselines (the bare broker
# pair and the PostgreSQL-only stage transaction), then the ratios are
# printed from that same run. The journey benchmark (issue #4) runs the whole
# pipeline on the emulator and on the RocketMQ proxy, and its figures are
# printed beside each other and beside their goals.
set -euo pipefail
cd "$(dirname "$0")/../.."
out=$(mktemp)
trap 'rm -f "$out"' EXIT

echo "== benchmarks (real PostgreSQL and RocketMQ proxy)"
go test -run='^$' -bench='Kernel|BareBroker|PostgresOnly' -benchtime=3x -count=1 -timeout 20m ./adapter/kernelbench/ | tee "$out"
go test -run='^$' -bench=. -benchtime=2s -count=1 ./shared/inbox/ | tee -a "$out"

echo "== outbox and inbox history (issue 13): the relay's claim-and-publish and a stage transaction beside 0, 1 and 10 million rows of history in each table"
go test -run='^$' -bench='^BenchmarkLogHistory$' -benchtime=3s -count=1 -timeout 30m ./adapter/relay/ | tee -a "$out"

echo "== the RocketMQ client's own log: the bare broker pair at info into log files (the client's default), then at warn to stderr (ours)"
clientlog=$(mktemp -d)
ROCKETMQ_CLIENT_LOG_LEVEL=info ROCKETMQ_CLIENT_LOG_DIR="$clientlog" \
	go test -run='^$' -bench='^BenchmarkBareBroker$/^consumers=1$' -benchtime=3x -count=1 -timeout 10m ./adapter/kernelbench/ |
	sed 's/^BenchmarkBareBroker/BenchmarkClientLogInfo/' | tee -a "$out"
rm -rf "$clientlog"
go test -run='^$' -bench='^BenchmarkBareBroker$/^consumers=1$' -benchtime=3x -count=1 -timeout 10m ./adapter/kernelbench/ |
	sed 's/^BenchmarkBareBroker/BenchmarkClientLogWarn/' | tee -a "$out"

echo "== journey: 30 generations a run through the whole pipeline (real PostgreSQL, Redis, S3, ffmpeg; emulator, then RocketMQ proxy)"
go test -run='^$' -bench='^BenchmarkJourney$' -benchtime=1x -count=1 -timeout 15m ./local/ | tee -a "$out"

echo "== render: a 26.5 s timeline, plain ffmpeg in one pass beside the render stage in chunks (real PostgreSQL, S3, ffmpeg)"
go test -run='^$' -bench='^BenchmarkRender$' -benchtime=1x -count=1 -timeout 10m ./functions/render/ | tee -a "$out"

echo "== scheduling (issue 25): three tenants offered about 3x one model's slots, the backoff scheduler beside the wait list (real PostgreSQL, Redis, S3, ffmpeg; emulator)"
go test -run='^$' -bench='^BenchmarkScheduling$' -benchtime=1x -count=1 -timeout 30m ./local/ | tee -a "$out"

echo "== side by side"
awk '
	function metric(unit,   i) { for (i = 3; i < NF; i++) if ($(i+1) == unit) return $i; return "" }
	/^BenchmarkKernel-[0-9]+ /        { kernel = metric("events/s"); gocpu = metric("go-cpu-ms/event") }
	/^BenchmarkKernelBatched-[0-9]+ / { batched = metric("events/s") }
	/^BenchmarkKernelPaced1000/       { p99 = metric("ack-p99-ms") }
	/^BenchmarkBareBroker/            { v = metric("events/s"); if (v + 0 > bare + 0) bare = v }
	/^BenchmarkPostgresOnly/          { v = metric("tx/s"); if (v + 0 > pg + 0) pg = v }
	/^BenchmarkClientLogInfo/         { loginfo = metric("client-cpu-s/1k") }
	/^BenchmarkClientLogWarn/         { logwarn = metric("client-cpu-s/1k") }
	END {
		printf "kernel           %8.0f events/s\n", kernel
		if (batched != "") printf "kernel, batched  %8.0f events/s\n", batched
		printf "bare broker pair %8.0f events/s   kernel/bare = %.2f\n", bare, (bare > 0 ? kernel / bare : 0)
		printf "PostgreSQL only  %8.0f tx/s       kernel/pg   = %.2f\n", pg, (pg > 0 ? kernel / pg : 0)
		# Each event costs one broker round trip and one stage transaction,
		# on the same two cores: the kernel cannot beat the two in series.
		bound = (bare > 0 && pg > 0) ? 1 / (1 / bare + 1 / pg) : 0
		printf "bound 1/(1/bare + 1/pg) %8.0f events/s   kernel/bound = %.2f (goal >= 0.90)\n", bound, (bound > 0 ? kernel / bound : 0)
		if (gocpu != "") printf "kernel, this process: %.2f CPU-ms per event (goal <= 0.50)\n", gocpu
		if (p99 != "") printf "p99 commit->ACK at 1,000 events/s: %s ms\n", p99
		if (loginfo != "" && logwarn != "")
			printf "RocketMQ client CPU-s per 1k events: %.2f at info into files, %.2f at warn to stderr: %.0f%% saved\n",
				loginfo, logwarn, (loginfo > 0 ? 100 * (loginfo - logwarn) / loginfo : 0)
	}' "$out"

echo
awk '
	function metric(unit,   i) { for (i = 3; i < NF; i++) if ($(i+1) == unit) return $i; return "" }
	function cell(broker, jobs, unit,   v) { v = m[broker, jobs, unit]; return v == "" ? "       -" : sprintf("%8.3f", v) }
	# share is the control plane (this process and the services) over all
	# the CPU a generation costs, ffmpeg included.
	# busy leaves out the CPU the services use at rest (with no client,
	# for as long as the run took): informational, beside the goal.
	function share(broker, busy,   c, t) {
		c = m[broker, "instant-jobs", "ctl-cpu-s/gen"] + m[broker, "instant-jobs", "svc-cpu-s/gen"]
		if (busy) c -= m[broker, "instant-jobs", "svc-idle-cpu-s/gen"]
		t = c + m[broker, "instant-jobs", "media-cpu-s/gen"]
		return t > 0 ? sprintf("%8.3f", c / t) : "       -"
	}
	function row(label, jobs, unit, goal) {
		printf "%-44s %s %s   %s\n", label, cell("emulator", jobs, unit), cell("rocketmq", jobs, unit), goal
	}
	/^BenchmarkJourney\// {
		split($1, p, "/"); jobs = p[3]; sub(/-[0-9]+$/, "", jobs)
		n = split("gen/s msgs/gen wake-p99-s ctl-cpu-s/gen media-cpu-s/gen svc-cpu-s/gen svc-idle-cpu-s/gen", units, " ")
		for (i = 1; i <= n; i++) m[p[2], jobs, units[i]] = metric(units[i])
		seen = 1
	}
	END {
		if (!seen) exit
		printf "%-44s %8s %8s\n", "journey, 30 generations a run", "emulator", "rocketmq"
		row("generations/s, instant jobs", "instant-jobs", "gen/s", "")
		row("broker messages/generation, default jobs", "default-jobs", "msgs/gen", "")
		row("broker messages/generation, instant jobs", "instant-jobs", "msgs/gen", "")
		row("wake-up lateness p99 s, default jobs", "default-jobs", "wake-p99-s", "(goal <= 1.5)")
		row("wake-up lateness p99 s, instant jobs", "instant-jobs", "wake-p99-s", "(goal <= 1.5)")
		row("control CPU s/generation, this process", "instant-jobs", "ctl-cpu-s/gen", "")
		row("control CPU s/generation, services", "instant-jobs", "svc-cpu-s/gen", "(whole processes: other clients too)")
		row("  of which the services at rest", "instant-jobs", "svc-idle-cpu-s/gen", "(their CPU with no client, as long as the run)")
		row("media CPU s/generation, ffmpeg/ffprobe", "instant-jobs", "media-cpu-s/gen", "")
		printf "%-44s %s %s   %s\n", "control share of the CPU, instant jobs", share("emulator", 0), share("rocketmq", 0), "(goal <= 0.20)"
		printf "%-44s %s %s   %s\n", "  the same without the services at rest", share("emulator", 1), share("rocketmq", 1), "(informational)"
	}' "$out"

echo
awk '
	function metric(unit,   i) { for (i = 3; i < NF; i++) if ($(i+1) == unit) return $i; return "" }
	/^BenchmarkRender\/plain-ffmpeg/            { pw = metric("wall-s/out-s"); pc = metric("ffmpeg-cpu-s/out-s") + metric("go-cpu-s/out-s") }
	/^BenchmarkRender\/pipeline-chunked\/workers=1/ { w1 = metric("wall-s/out-s"); c1 = metric("ffmpeg-cpu-s/out-s") + metric("go-cpu-s/out-s"); r1 = metric("render-cpu-s/out-s"); p1 = metric("probe-cpu-s/out-s") }
	/^BenchmarkRender\/pipeline-chunked\/workers=2/ { w2 = metric("wall-s/out-s") }
	/^BenchmarkRender\/plain-ffmpeg/            { pr = metric("render-cpu-s/out-s") }
	/^BenchmarkRender\/hostile-title/           { hw = metric("wall-s/out-s") }
	END {
		if (pw == "") exit
		printf "render, per output second          plain ffmpeg   render stage\n"
		printf "wall s (one chunk at a time)       %8.3f       %8.3f   ratio %.2f\n", pw, w1, (pw > 0 ? w1 / pw : 0)
		printf "CPU s (ffmpeg, ffprobe, Go)        %8.3f       %8.3f   ratio %.2f (goal <= 1.05)\n", pc, c1, (pc > 0 ? c1 / pc : 0)
		printf "  of which the chunks ffmpeg runs  %8.3f       %8.3f;  ffprobe checks %.3f\n", pr, r1, p1
		printf "chunked, two at a time, speedup over one pass: %.2fx\n", (w2 > 0 ? pw / w2 : 0)
		if (hw != "") printf "title %%{e:while(1,1)} beside a plain title, one pass, wall s: %.3f beside %.3f (ratio %.2f)\n", hw, pw, (pw > 0 ? hw / pw : 0)
	}' "$out"

echo
awk '
	function metric(unit,   i) { for (i = 3; i < NF; i++) if ($(i+1) == unit) return $i; return "" }
	function ratio(w, h) { return v[w, "0"] > 0 ? v[w, h] / v[w, "0"] : 0 }
	function row(label, w,   r1, r10) {
		r1 = ratio(w, "1M"); r10 = ratio(w, "10M")
		printf "%-40s %8.3f %8.3f %8.3f   %.2f  %.2f  %s\n", label, v[w, "0"], v[w, "1M"], v[w, "10M"], r1, r10,
			(r1 <= 1.2 && r10 <= 1.2 ? "flat (target <= 1.20x)" : "NOT flat (target <= 1.20x)")
	}
	/^BenchmarkLogHistory\/history=/ {
		split($1, p, "/"); h = p[2]; sub(/^history=/, "", h); w = p[3]; sub(/-[0-9]+$/, "", w)
		v[w, h] = (w == "relay-claim") ? metric("ms/batch") : metric("ms/tx")
		seen = 1
	}
	END {
		if (!seen) exit
		printf "%-40s %8s %8s %8s   %s\n", "history rows in each table", "0", "1M", "10M", "1M/0  10M/0"
		row("relay claim+publish of 64, ms/batch", "relay-claim")
		row("stage transaction (inbox insert), ms/tx", "inbox-do")
	}' "$out"
