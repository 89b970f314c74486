#!/usr/bin/env bash
# test.sh: what `make test` runs, inside with-services.sh: every test, against
# the real services.
set -euo pipefail
cd "$(dirname "$0")/../.."

# took prints how long the step before it ran: the budget of `make test` is
# spent per step.
step_started=$SECONDS
took() {
	echo "== took $((SECONDS - step_started))s"
	step_started=$SECONDS
}

# The broker restart tests stop the proxy every test uses: they run alone,
# one package at a time, before anything else.
echo "== go test -p 1 -run '^TestProxyRestart' ./adapter/e2e/ ./adapter/mq/rocketmq/ ./local/ (restart the RocketMQ proxy)"
go test -p 1 -count=1 -timeout 15m -run '^TestProxyRestart' ./adapter/e2e/ ./adapter/mq/rocketmq/ ./local/
took

# The RocketMQ v5 Go client has data races of its own (see the package doc of
# adapter/mq/rocketmq): tests that drive it are built only without -race.
# They run alone: beside the -race pass, their broker timing failed under
# the load (a rebalance that found nothing in flight, a round trip past its
# deadline).
echo "== go test -run '^TestRealBroker' ./adapter/... ./local/... (real RocketMQ client, without -race)"
go test -count=1 -timeout 15m -run '^TestRealBroker' ./adapter/... ./local/...
took
# The longest packages first: go test starts them in the order given, and
# one that starts last finishes last.
echo "== go test -race ./..."
go test -race -count=1 -timeout 15m ./local/ ./functions/render/ ./functions/reconcile/ ./...
took

# The short chaos run restarts services every test uses: it runs alone, last.
echo "== chaos, the short run: every binary its own process, faults from seed ${CHAOS_SEED:-1}, the invariants"
AIVEDIO_SERVICES_SCRIPT=local/services/services.sh go run ./local/chaos -n 40 -faults 75s -every 3s -converge 6m -seed "${CHAOS_SEED:-1}"
took
