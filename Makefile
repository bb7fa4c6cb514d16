# Run `make help` for the list of targets.
SHELL := /bin/bash
GO      ?= go
BIN     := bin/messaging-api
ROOMCTL := bin/roomctl

# The local ActiveMQ Classic that scripts/activemq.sh runs (STOMP on 61623).
ACTIVEMQ_STOMP_PORT ?= 61623
LOCAL_BROKER_URL    := stomp://127.0.0.1:$(ACTIVEMQ_STOMP_PORT)?dialect=activemq

.DEFAULT_GOAL := help

.PHONY: help
help: ## list the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  %-14s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

.PHONY: build
build: ## build bin/messaging-api (the service) and bin/roomctl (its command-line client)
	CGO_ENABLED=0 $(GO) build -trimpath -o $(BIN) ./cmd/messaging-api
	CGO_ENABLED=0 $(GO) build -trimpath -o $(ROOMCTL) ./cmd/roomctl

.PHONY: run
run: ## run the service with the embedded defaults (SQLite file, in-process broker) on :8080, with the web console at /console/; push URLs may be on loopback
	@$(build_quietly)
	@addr="$${HTTP_ADDR:-:8080}"; printf '\n  The web console: http://localhost:%s/console/ (sign in with an API key)\n\n' "$${addr##*:}"
	PUSH_ALLOWED_CIDRS=$${PUSH_ALLOWED_CIDRS:-127.0.0.0/8,::1/128} $(BIN) serve

.PHONY: run-artemis
run-artemis: ## run the service against the local Apache ActiveMQ Artemis (installed from Maven Central on first use) and PostgreSQL; prints a first admin API key
	bash scripts/artemis.sh start
	bash scripts/postgres.sh ensure
	@db=$(LOCAL_DATABASE_URL) && export BROKER_URL="$$(bash scripts/artemis.sh url)" DATABASE_URL="$${DATABASE_URL:-$$db}" \
		PUSH_ALLOWED_CIDRS="$${PUSH_ALLOWED_CIDRS:-127.0.0.0/8,::1/128}" && \
	$(first_admin_key) && \
	$(build_quietly) && \
	$(BIN) serve

.PHONY: run-activemq
run-activemq: broker-start ## run the service against the local ActiveMQ Classic and PostgreSQL; prints a first admin API key
	bash scripts/postgres.sh ensure
	@db=$(LOCAL_DATABASE_URL) && export BROKER_URL='$(LOCAL_BROKER_URL)' DATABASE_URL="$${DATABASE_URL:-$$db}" \
		PUSH_ALLOWED_CIDRS="$${PUSH_ALLOWED_CIDRS:-127.0.0.0/8,::1/128}" && \
	$(first_admin_key) && \
	$(build_quietly) && \
	$(BIN) serve

# build_quietly builds $(BIN), saying so first: the first build downloads the
# modules and takes a minute or two with nothing else to show. The run targets
# then start the binary itself (not go run), which stops cleanly on Ctrl-C.
define build_quietly
echo "building $(BIN) (the first build fetches the Go modules: a minute or two)..." && \
CGO_ENABLED=0 $(GO) build -o $(BIN) ./cmd/messaging-api
endef

# The database of run-artemis and run-activemq: the local PostgreSQL's
# "postgres" database (the tests use "test").
LOCAL_DATABASE_URL = "$$(bash scripts/postgres.sh url | sed 's,/test?,/postgres?,')"

# first_admin_key makes an admin API key in DATABASE_URL when it has none, and
# prints it once (as make run does on its SQLite file).
define first_admin_key
$(GO) run ./cmd/messaging-api migrate && \
if ! $(GO) run ./cmd/messaging-api apikey list | grep -q ' admin '; then \
	key=$$($(GO) run ./cmd/messaging-api apikey create -role admin -name "local admin") && \
	printf '\n  A first admin API key (shown only now; keep it):\n\n    export API_KEY=%s\n\n' "$$key"; \
fi
endef

# Tests use the local PostgreSQL (scripts/postgres.sh ensure installs and starts
# it) unless TEST_DATABASE_URL names another.
TEST_DATABASE_URL ?= $(shell bash scripts/postgres.sh url 2>/dev/null)
export TEST_DATABASE_URL

# The packages whose tests use a real broker (they read BROKER_TEST_URL, or
# ask apptest.RealBroker for it): they run once more on ActiveMQ Classic after
# the whole suite ran on Artemis.
BROKER_TEST_PKGS = $$(grep -rlE --include='*_test.go' 'BROKER_TEST_URL|apptest\.RealBroker' . | xargs -n1 dirname | sort -u | tr '\n' ' ')

# test_on runs the tests of $(2) against the broker $(1) (artemis or activemq):
# everything but the restart tests, then those alone (they restart the broker
# every other package uses). Without the broker installed the broker tests
# skip, except on CI (CI=true), where they fail.
define test_on
if bash scripts/$(1).sh installed || [ "$${CI:-}" = true ]; then \
	bash scripts/$(1).sh start && \
	url="$$(if [ $(1) = artemis ]; then bash scripts/artemis.sh url; else echo '$(LOCAL_BROKER_URL)'; fi)" && \
	echo "== tests on $(1) ($(2))" && \
	env -u BROKER_TEST_RESTART_CMD BROKER_TEST_URL="$$url" $(GO) test -race -count=1 -timeout 20m $(2) && \
	echo "== broker restart tests on $(1)" && \
	BROKER_TEST_URL="$$url" BROKER_TEST_RESTART_CMD="bash scripts/$(1).sh restart" \
		$(GO) test -race -count=1 -timeout 10m -run 'TestStompContract/Restart' ./broker/; \
else \
	echo "$(1) is not installed (bash scripts/$(1).sh install): its broker tests skip"; \
	env -u BROKER_TEST_RESTART_CMD $(GO) test -race -count=1 -timeout 20m $(2); \
fi
endef

.PHONY: test test-artemis test-activemq
test: ## run every test against PostgreSQL and Artemis, then the broker tests against ActiveMQ Classic
	@$(MAKE) --no-print-directory test-artemis
	@$(MAKE) --no-print-directory test-activemq TEST_PKGS="$(BROKER_TEST_PKGS)"
test-artemis: ## run every test against the local Artemis (started, and installed from Maven Central, if needed)
	@$(call test_on,artemis,$(or $(TEST_PKGS),./...))
test-activemq: ## run every test against the local ActiveMQ Classic (TEST_PKGS narrows it)
	@$(call test_on,activemq,$(or $(TEST_PKGS),./...))

.PHONY: test-short
test-short: ## unit tests only: no PostgreSQL, no broker
	$(GO) test -short -count=1 ./...

.PHONY: lint
lint: ## gofmt, go mod tidy, go vet, and golangci-lint (installed first on CI)
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	@$(GO) mod tidy -diff >/dev/null || { echo "go mod tidy would change go.mod or go.sum"; $(GO) mod tidy -diff; exit 1; }
	@cd tools && $(GO) mod tidy -diff >/dev/null || { echo "go mod tidy would change tools/go.mod or tools/go.sum"; $(GO) mod tidy -diff; exit 1; }
	$(GO) vet ./...
	@lint="$$(go env GOPATH)/bin/golangci-lint"; \
	if [ ! -x "$$lint" ] && [ "$${CI:-}" = true ]; then $(MAKE) --no-print-directory lint-install; fi; \
	if [ -x "$$lint" ]; then "$$lint" run ./...; \
	else echo "golangci-lint not installed (make lint-install); skipped"; fi

.PHONY: lint-install
lint-install: ## install golangci-lint v2.6.0 with the Go toolchain (a few minutes)
	$(GO) install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@v2.6.0

.PHONY: fmt
fmt: ## format the code
	gofmt -w $$(git ls-files '*.go')

# The clients generated from openapi.yaml: the Go client (client/client.gen.go,
# by the oapi-codegen that tools/go.mod pins) and the TypeScript types
# (clients/typescript/openapi.d.ts, by openapi-typescript). The npm packages
# (openapi-typescript, typescript, @redocly/cli) are pinned by
# clients/typescript/package-lock.json and installed by npm ci on first use.
TS_DIR := clients/typescript

$(TS_DIR)/node_modules/.package-lock.json: $(TS_DIR)/package-lock.json
	@command -v npm >/dev/null || { echo "npm is missing: install Node.js 20.19 or later with npm (apt-get install nodejs npm)"; exit 1; }
	@node -e 'const [a, b] = process.versions.node.split(".").map(Number); process.exit(a > 20 || (a === 20 && b >= 19) ? 0 : 1)' || \
		{ echo "Node.js $$(node --version) is too old: @redocly/cli needs 20.19 or later"; exit 1; }
	cd $(TS_DIR) && npm ci --no-audit --no-fund

.PHONY: generate generate-check spec-lint
generate: $(TS_DIR)/node_modules/.package-lock.json ## regenerate the Go client (client/) and the TypeScript types (clients/typescript/) from openapi.yaml
	$(GO) tool -modfile=tools/go.mod oapi-codegen -config client/oapi-codegen.yaml openapi.yaml
	cd $(TS_DIR) && npm run --silent generate

generate-check: generate ## fail when regenerating the clients changes them; type-check the TypeScript (tsc --strict)
	@changed=$$(git diff --name-only -- client $(TS_DIR); git ls-files --others --exclude-standard -- client $(TS_DIR)); \
	if [ -n "$$changed" ]; then \
		echo "make generate changed the generated clients (commit them with openapi.yaml):"; echo "$$changed"; exit 1; fi
	cd $(TS_DIR) && npx --no-install tsc --strict --noEmit -p .

spec-lint: $(TS_DIR)/node_modules/.package-lock.json ## lint openapi.yaml with Redocly CLI (rules in redocly.yaml; any problem fails)
	$(TS_DIR)/node_modules/.bin/redocly lint openapi.yaml

.PHONY: migrate
migrate: ## apply migrations to DATABASE_URL and exit
	$(GO) run ./cmd/messaging-api migrate

# deploy-check validates deploy/kubernetes/ offline against the Kubernetes
# schemas bundled in the PyPI package kubernetes-validate (installed into
# .local/kv on first use, the only step that needs the network).
KUBE_VALIDATE_VERSION ?= 1.37.0
KUBE_VERSION          ?= 1.35.0

.PHONY: deploy-check
deploy-check: ## validate deploy/kubernetes/ strictly against the Kubernetes schemas (KUBE_VERSION), offline, with kubernetes-validate
	@KUBE_VALIDATE_VERSION='$(KUBE_VALIDATE_VERSION)' KUBE_VERSION='$(KUBE_VERSION)' bash deploy/check-kubernetes.sh

.PHONY: broker-install broker-start broker-stop
broker-install: ## install ActiveMQ Classic from Debian's packages
	bash scripts/activemq.sh install
broker-start: ## start the local ActiveMQ Classic in the background (STOMP on 61623)
	bash scripts/activemq.sh start
broker-stop: ## stop the local ActiveMQ Classic
	bash scripts/activemq.sh stop

# BROKER picks the broker of bench, bench-smoke, fault and fault-smoke:
# artemis (Apache ActiveMQ Artemis, scripts/artemis.sh; the default) or
# activemq (ActiveMQ Classic, scripts/activemq.sh). ARTEMIS_STOMP_PORT and
# ARTEMIS_DIR (or ACTIVEMQ_STOMP_PORT and ACTIVEMQ_DIR) choose which local
# instance bench and bench-smoke start and use.
BROKER ?= artemis

# bench_broker starts BROKER's local instance, unless it runs, and sets the
# shell variable url to its BROKER_URL.
define bench_broker
case '$(BROKER)' in \
	artemis) bash scripts/artemis.sh start && url="$$(bash scripts/artemis.sh url)" ;; \
	activemq) bash scripts/activemq.sh start && url='$(LOCAL_BROKER_URL)' ;; \
	*) echo "BROKER must be artemis or activemq, not '$(BROKER)'" >&2; exit 2 ;; \
esac
endef

.PHONY: bench bench-smoke
bench: ## benchmark the service against the raw broker (BROKER=artemis|activemq, started if needed; + PostgreSQL); table on stdout, bench.json
	@$(bench_broker); \
	$(GO) run ./cmd/msgbench -broker-kind '$(BROKER)' -broker "$$url" -db "$$TEST_DATABASE_URL" $(BENCH_FLAGS)
bench-smoke: ## run the benchmark with tiny parameters and check every figure (BROKER's local broker when installed, else embedded)
	@if bash scripts/$(if $(filter activemq,$(BROKER)),activemq,artemis).sh installed; then \
		$(bench_broker) && \
		export BROKER_TEST_URL="$${BROKER_TEST_URL:-$$url}"; \
	else \
		echo "$(BROKER) is not installed: the benchmark runs on the embedded broker"; \
	fi; \
	$(GO) test -count=1 -run 'TestSmoke|TestCheck' -v ./cmd/msgbench

# The fault suite runs its own PostgreSQL cluster and BROKER (temp dir, free
# ports); it never touches the shared ones. Needs the postgresql package and
# the broker installed (bash scripts/artemis.sh install, or make broker-install
# for ActiveMQ Classic). FAULT_FLAGS adds flags, e.g. -keep -json fault.json.
# fault-ha and fault-ha-smoke run an Artemis primary/backup pair of their own
# (scripts/artemis.sh pair, free ports) and fail it over and back.
.PHONY: fault fault-smoke fault-ha fault-ha-smoke
fault: ## fault suite: load through 2 api + 2 dispatcher processes while killing them, the broker (BROKER=artemis|activemq) and PostgreSQL; fails if an accepted message is lost (~3-4 min)
	$(GO) run ./cmd/faultsuite -broker-kind '$(BROKER)' $(FAULT_FLAGS)
fault-smoke: ## the fault suite's short form, for CI (~1.5 min; BROKER=artemis|activemq)
	$(GO) run ./cmd/faultsuite -short -broker-kind '$(BROKER)' $(FAULT_FLAGS)
fault-ha: ## fault suite on an Artemis primary/backup pair: 3 rounds of kill -9 of the active node and fail-back under load; fails if an accepted message is lost (~3-4 min)
	$(GO) run ./cmd/faultsuite -ha $(FAULT_FLAGS)
fault-ha-smoke: ## the HA fault suite's short form, for CI: one failover and fail-back (~2 min)
	$(GO) run ./cmd/faultsuite -ha -short $(FAULT_FLAGS)

# Fuzz targets as package:Target; go test -fuzz takes one of each per run.
# Seeds are in each package's testdata/fuzz/<Target>, where a failing input lands.
FUZZ_TARGETS := api:FuzzDecodeBytes api:FuzzNullable api:FuzzCheckJSON \
	rooms:FuzzRoomRequest rooms:FuzzCompileSchema subscriptions:FuzzSubscriptionRequest publish:FuzzPublishRequest \
	subscriptions:FuzzAttributeFilter \
	retry:FuzzFourPhase retry:FuzzExponential retry:FuzzBackoff retry:FuzzRetryPolicyJSON retry:FuzzPreview \
	push:FuzzParseRetryAfter push:FuzzRetryAfterForms push:FuzzEventOf push:FuzzEventOfHeaders \
	broker:FuzzHeaderRoundTrip broker:FuzzDecodeMessage redact:FuzzConnString
FUZZTIME ?= 30s

.PHONY: fuzz fuzz-smoke
fuzz: ## run each fuzz target for FUZZTIME (30s); FUZZ_PARALLEL sets the workers
	@set -e; for t in $(FUZZ_TARGETS); do \
		echo "== $${t%%:*} $${t##*:} ($(FUZZTIME))"; \
		$(GO) test ./$${t%%:*} -run '^$$' -fuzz "^$${t##*:}\$$" -fuzztime $(FUZZTIME) -fuzzminimizetime 10s \
			$(if $(FUZZ_PARALLEL),-parallel $(FUZZ_PARALLEL)); \
	done
# fuzz-smoke counts executions instead of timing them: with a duration, Go
# before 1.27 can fail a target with "context deadline exceeded" at the end
# of -fuzztime though nothing failed (golang/go#75804; seen in CI).
fuzz-smoke: ## run each fuzz target for 10000 executions (CI)
	@$(MAKE) --no-print-directory fuzz FUZZTIME=10000x

.PHONY: clean
clean: ## remove build output and local data
	rm -rf bin data .local
