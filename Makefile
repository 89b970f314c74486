# AiVedio Pipeline. `make help` lists the targets.
SHELL := /bin/bash
SERVICES := local/services/services.sh

.PHONY: help test run bench chaos lint services-up services-down services-env

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F ':.*## ' '{printf "  %-14s %s\n", $$1, $$2}'

test: ## start the real services, apply schema and topics, run all tests with -race, stop the services
	@local/services/with-services.sh local/services/test.sh

run: ## run the whole pipeline in one process (go run ./local), installing ffmpeg first if missing
	@local/run.sh

bench: ## run the kernel's benchmarks beside their baselines against the real services
	@local/services/with-services.sh local/services/bench.sh

chaos: ## the long chaos run: every binary its own process, faults at random, invariants checked (CHAOS_ARGS adds flags)
	@local/services/with-services.sh local/services/chaos.sh

lint: ## gofmt, go vet, staticcheck, go.mod tidy
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); exit 1; }
	go vet ./...
	go run honnef.co/go/tools/cmd/staticcheck@v0.8.2 ./...
	go mod tidy -diff

services-up: ## start PostgreSQL, Redis, RocketMQ, the S3 server (installing what is missing) and keep them running
	@$(SERVICES) up
	@source $${AIVEDIO_SERVICES_DIR:-/tmp/aivedio-services}/env && go run ./adapter migrate up && go run ./adapter topics apply

services-down: ## stop the services and remove their data
	@$(SERVICES) down

services-env: ## print the environment that reaches the running services (eval it)
	@$(SERVICES) env
