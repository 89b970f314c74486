#!/usr/bin/env bash
# with-services.sh CMD...: run CMD against the real services. Starts them
# (unless a developer already keeps them up with `make services-up`), applies
# the schema and the topic catalog, runs CMD with the services' environment,
# and stops what it started, whatever the outcome.
set -euo pipefail
cd "$(dirname "$0")/../.."
services=local/services/services.sh
dir=${AIVEDIO_SERVICES_DIR:-/tmp/aivedio-services}

started=0
if ! $services status >/dev/null 2>&1; then
	started=1
	trap '$services down' EXIT
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

"$@"
[ "$started" = 1 ] || echo "services left running (they were up before)"
