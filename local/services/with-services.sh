#!/usr/bin/env bash
# with-services.sh CMD...: run CMD against the real services. Starts them
# (unless a developer already keeps them up with `make services-up`), applies
# the schema and the topic catalog, runs CMD with the services' environment,
# and stops what it started, whatever the outcome. AIVEDIO_WHILE_STARTING
# names a command run beside the start (make test compiles the tests
# there); CMD waits for it, and its failure fails the run.
set -euo pipefail
cd "$(dirname "$0")/../.."
services=local/services/services.sh
dir=${AIVEDIO_SERVICES_DIR:-/tmp/aivedio-services}

started=0
beside_pid=
cleanup() {
	if [ -n "$beside_pid" ]; then
		pkill -TERM -P "$beside_pid" 2>/dev/null || true
		kill "$beside_pid" 2>/dev/null || true
	fi
	[ "$started" = 0 ] || $services down
}
trap cleanup EXIT
if [ -n "${AIVEDIO_WHILE_STARTING:-}" ]; then
	echo "== $AIVEDIO_WHILE_STARTING, beside the services' start"
	$AIVEDIO_WHILE_STARTING &
	beside_pid=$!
fi

if ! $services status >/dev/null 2>&1; then
	started=1
	# Whatever a killed earlier run left (stale pid files, half-written data)
	# goes first: the run starts from empty services.
	$services down
	$services up
fi
# shellcheck disable=SC1091
source "$dir/env"
export AIVEDIO_REQUIRE_SERVICES=1

echo "== services"
"$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n1)/postgres" --version
redis-server --version | cut -d' ' -f1-3
echo "RocketMQ proxy $ROCKETMQ_ENDPOINT: $(ls "${ROCKETMQ_ADMIN_CLASSPATH%\*}" | grep -m1 -o 'rocketmq-proxy-[0-9.]*[0-9]')"
echo "S3: versitygw at $S3_ENDPOINT"
ffmpeg -version | head -n1

echo "== migrations and topic catalog"
go run ./adapter migrate up
go run ./adapter topics apply

if [ -n "$beside_pid" ]; then
	waited=$SECONDS
	wait "$beside_pid" || { echo "== FAIL: $AIVEDIO_WHILE_STARTING failed"; exit 1; }
	beside_pid=
	echo "== waited $((SECONDS - waited))s for $AIVEDIO_WHILE_STARTING"
fi

"$@"
[ "$started" = 1 ] || echo "services left running (they were up before)"
