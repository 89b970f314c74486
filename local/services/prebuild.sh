#!/usr/bin/env bash
# prebuild.sh: compile every package and test package test.sh will run,
# with and without -race, and link nothing, so that the tests only link
# when they start. `go list -export` compiles to produce export data and
# fills the same build cache `go test` reads; a test binary's link is
# never cached, so linking here would be done twice. with-services.sh
# runs this while the services start: the JVMs spend that time waiting on
# themselves, and the compiler has the CPU.
set -euo pipefail
cd "$(dirname "$0")/../.."
go list -race -export -test -deps ./... >/dev/null
go list -export -test -deps ./adapter/... ./local/... >/dev/null
