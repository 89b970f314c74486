# AiVedio Pipeline. `make help` lists the targets.
SHELL := /bin/bash
SERVICES := local/services/services.sh
# What local/services/services.sh env exports: test-fast unsets them, so
# that a shell that reaches the services still runs only the fast tests.
SERVICE_VARS := DATABASE_URL REDIS_URL ROCKETMQ_ENDPOINT ROCKETMQ_NAMESRV ROCKETMQ_CLUSTER ROCKETMQ_METRICS_URL \
	ROCKETMQ_ADMIN_CLASSPATH ROCKETMQ_ACL_ENDPOINT ROCKETMQ_ACL_NAMESRV ROCKETMQ_ACL_CLUSTER ROCKETMQ_ACL_BROKER \
	ROCKETMQ_ACL_ADMIN_ACCESS_KEY ROCKETMQ_ACL_ADMIN_SECRET_KEY S3_ENDPOINT S3_REGION S3_ACCESS_KEY_ID S3_SECRET_ACCESS_KEY \
	FFMPEG_PATH FFPROBE_PATH

.PHONY: help test test-fast run bench chaos lint services-up services-down services-env

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F ':.*## ' '{printf "  %-14s %s\n", $$1, $$2}'

test: ## start the real services, apply schema and topics, run every test (-race where the RocketMQ client allows), stop the services
	@AIVEDIO_WHILE_STARTING=local/services/prebuild.sh local/services/with-services.sh local/services/test.sh

test-fast: ## the edit loop: every test that needs no service (the others skip), no -race, no services started
	@env -u AIVEDIO_REQUIRE_SERVICES $(foreach v,$(SERVICE_VARS),-u $(v)) go test -count=1 -short ./...

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
