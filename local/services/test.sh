#!/usr/bin/env bash
# test.sh: what `make test` runs, inside with-services.sh: every test, against
# the real services.
set -euo pipefail
cd "$(dirname "$0")/../.."

# The RocketMQ v5 Go client has data races of its own (see the package doc of
# adapter/mq/rocketmq): tests that drive it are built only without -race and
# run first; then everything else with -race.
echo "== go test -run '^TestRealBroker' ./adapter/... ./local/... (real RocketMQ client, without -race)"
go test -count=1 -timeout 15m -run '^TestRealBroker' ./adapter/... ./local/...
# The broker restart test stops the proxy every test uses: it runs alone.
echo "== go test -run '^TestProxyRestart$' ./adapter/e2e/ (restarts the RocketMQ proxy)"
go test -count=1 -timeout 10m -run '^TestProxyRestart$' ./adapter/e2e/
echo "== go test -race ./..."
go test -race -count=1 -timeout 15m ./...
