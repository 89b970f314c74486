#!/usr/bin/env bash
# test.sh: what `make test` runs. Starts the real services (unless a developer
# already keeps them up with `make services-up`), applies the schema and the
# topic catalog, runs every test with the race detector, and stops what it
# started, whatever the outcome.
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

echo "== services under test"
"$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n1)/postgres" --version
redis-server --version | cut -d' ' -f1-3
echo "RocketMQ proxy $ROCKETMQ_ENDPOINT: $(ls "${ROCKETMQ_ADMIN_CLASSPATH%\*}" | grep -m1 -o 'rocketmq-proxy-[0-9.]*')"
echo "S3: $("$(go env GOPATH)/bin/versitygw" --version 2>&1 | head -n1) at $S3_ENDPOINT"
ffmpeg -version | head -n1

echo "== migrations and topic catalog"
go run ./adapter migrate up
go run ./adapter topics apply

# The RocketMQ v5 Go client has data races of its own (see the package doc of
# adapter/mq/rocketmq): tests that drive it are built only without -race and
# run first; then everything else with -race.
echo "== go test -run '^TestRealBroker' ./adapter/... (real RocketMQ client, without -race)"
go test -count=1 -timeout 10m -run '^TestRealBroker' ./adapter/...
# The broker restart test stops the proxy every test uses: it runs alone.
echo "== go test -run '^TestProxyRestart$' ./adapter/e2e/ (restarts the RocketMQ proxy)"
go test -count=1 -timeout 10m -run '^TestProxyRestart$' ./adapter/e2e/
echo "== go test -race ./..."
go test -race -count=1 -timeout 15m ./...
[ "$started" = 1 ] || echo "services left running (they were up before make test)"
