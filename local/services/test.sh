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
# They spend their time waiting on the broker (redelivery windows, delays),
# so they run beside the -race pass, which spends its time on the CPU; every
# test has schemas, groups and tags of its own, so the two passes share
# nothing but the services. Their output follows the -race pass's.
echo "== go test -run '^TestRealBroker' ./adapter/... ./local/... (real RocketMQ client, without -race), beside:"
realbroker_log=$(mktemp)
trap 'rm -f "$realbroker_log"; [ -z "${realbroker_pid:-}" ] || kill "$realbroker_pid" 2>/dev/null || true' EXIT
go test -count=1 -timeout 15m -run '^TestRealBroker' ./adapter/... ./local/... >"$realbroker_log" 2>&1 &
realbroker_pid=$!
# The longest packages first: go test starts them in the order given, and
# one that starts last finishes last.
echo "== go test -race ./..."
race_status=0
go test -race -count=1 -timeout 15m ./local/ ./functions/render/ ./functions/reconcile/ ./... || race_status=$?
took
realbroker_status=0
wait "$realbroker_pid" || realbroker_status=$?
realbroker_pid=
echo "== go test -run '^TestRealBroker' (ran beside the -race pass)"
cat "$realbroker_log"
took
if [ "$race_status" != 0 ] || [ "$realbroker_status" != 0 ]; then
	echo "== FAIL: the -race pass exited $race_status, the real-broker pass $realbroker_status"
	exit 1
fi

# The short chaos run restarts services every test uses: it runs alone, last.
echo "== chaos, the short run: every binary its own process, faults from seed ${CHAOS_SEED:-1}, the invariants"
AIVEDIO_SERVICES_SCRIPT=local/services/services.sh go run ./local/chaos -n 40 -faults 75s -every 3s -converge 6m -seed "${CHAOS_SEED:-1}"
took
