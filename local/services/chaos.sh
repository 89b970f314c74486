#!/usr/bin/env bash
# chaos.sh [chaos flags]: what `make chaos` runs, inside with-services.sh:
# the long chaos run (go run ./local/chaos), every binary its own process,
# faults at random, the invariants checked at the end. CHAOS_ARGS adds
# flags (CHAOS_ARGS="-n 600 -seed 7" make chaos).
set -euo pipefail
cd "$(dirname "$0")/../.."
export AIVEDIO_SERVICES_SCRIPT=local/services/services.sh
# shellcheck disable=SC2086
exec go run ./local/chaos ${CHAOS_ARGS:-} "$@"
