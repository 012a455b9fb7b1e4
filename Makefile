# The README's two commands are `make run` and `make test`; .ci/run calls
# `make verify test`. Every target installs what it needs.
SHELL := /usr/bin/env bash
.SHELLFLAGS := -o errexit -o nounset -o pipefail -c
.DEFAULT_GOAL := build

BIN := _output/bin
GOTEST_FLAGS ?=

.PHONY: build
build: ## Build the controller binary into _output/bin.
	go build -o $(BIN)/foo-controller .

# The image's name and tag: artifacts/deploy/kustomization.yaml's, so that
# a tarball loaded into kind is what the Deployment runs.
IMAGE ?= example.com/foo-controller:dev

.PHONY: image
image: ## Build the image into _output/foo-controller.tar, no Docker needed (IMAGE=name:tag, PUSH=1 to push it).
	GOWORK=off go -C hack/image run . -tag '$(IMAGE)' $(if $(filter 1 true yes,$(PUSH)),-push)

.PHONY: generate
generate: ## Regenerate clientset, listers, informers, deepcopy and the CRD.
	hack/update-codegen.sh

.PHONY: verify
verify: ## Generated code up to date, docs links, gofmt, go vet, golangci-lint.
	hack/verify-codegen.sh
	hack/verify-docs.sh
	@unformatted="$$(gofmt -l $$(git ls-files --cached --others --exclude-standard '*.go'))"; \
	  if [[ -n "$$unformatted" ]]; then echo "gofmt needed: $$unformatted"; exit 1; fi
	go vet ./...
	go vet -tags integration ./pkg/integration/
	hack/lint.sh

.PHONY: test-unit
test-unit: ## Unit tests (fake clientsets, pure functions) with the race detector; the image (TestImage).
	go test -race $(GOTEST_FLAGS) ./...
	go -C hack/plot test $(GOTEST_FLAGS) ./...
	go -C hack/image test $(GOTEST_FLAGS) ./...

.PHONY: test-integration
test-integration: ## Integration tests on a real control plane (builds it on first use).
	FOO_TESTBIN="$$(hack/install-testbin.sh --print-dir)" \
	  go test -tags integration -count=1 -timeout 30m $(GOTEST_FLAGS) ./pkg/integration/

.PHONY: test
test: test-unit test-integration ## Every test: unit, then integration on a real control plane.

SOAK_DURATION ?= 10m
SOAK_SEED ?=
SOAK_SHARDS ?=

# Empty SOAK_SEED: a random seed (the test logs it for a replay). Empty
# SOAK_SHARDS: one controller (TestChaosSoak); a slot count (4, 8):
# sharded replicas whose membership churns (TestChaosSoakSharded, see
# docs/sharding.md). The timeout is SOAK_DURATION plus 30m: Go durations
# written one after the other add up ("10m30m" is 40m).
.PHONY: soak
soak: ## Chaos soak on a real control plane: SOAK_DURATION=10m SOAK_SEED=... SOAK_SHARDS=4 (sharded)
	FOO_TESTBIN="$$(hack/install-testbin.sh --print-dir)" \
	  FOO_SOAK_DURATION=$(SOAK_DURATION) FOO_SOAK_SEED=$(SOAK_SEED) FOO_SOAK_SLOTS=$(SOAK_SHARDS) \
	  go test -tags integration -count=1 -timeout $(SOAK_DURATION)30m $(GOTEST_FLAGS) \
	  -run '^$(if $(SOAK_SHARDS),TestChaosSoakSharded,TestChaosSoak)$$' -v ./pkg/integration/

.PHONY: run
run: ## Run the controller with the example Foo (on a local control plane unless KUBECONFIG is set); REPLICAS=2 for sharded replicas; WEBHOOK_ADDR=127.0.0.1:9543 to serve the conversion webhook there (default 127.0.0.1:9443).
	hack/run-local.sh

.PHONY: local-up
local-up: ## Start the local control plane in the background.
	hack/local-up.sh

.PHONY: local-down
local-down: ## Stop the local control plane.
	hack/local-down.sh

.PHONY: migrate-storage
migrate-storage: ## Move stored Foos (and their managed fields) to the CRD's storage version and trim status.storedVersions (KUBECONFIG's cluster; MIGRATE_FLAGS=-method=rewrite).
	go run ./hack/migrate-storage $(MIGRATE_FLAGS)

.PHONY: bench
bench: ## Measure the controller on the local control plane (see docs/performance.md).
	go run ./hack/bench $(BENCH_FLAGS)

.PHONY: bench-conversion
bench-conversion: ## The conversion webhook's cost per Foo, each way (no cluster; seconds).
	go test -run '^$$' -bench Convert -count 5 ./pkg/webhook/

FUZZTIME ?= 60s

.PHONY: fuzz
fuzz: ## Run every fuzz target for FUZZTIME each (default 60s; about 8 minutes in all): its seeds, then new inputs (docs/testing.md).
	FUZZTIME=$(FUZZTIME) hack/fuzz.sh

.PHONY: bench-webhook
bench-webhook: ## The controller's peak RSS under issue 39's attack on its webhook port, beside its figure without (4,000 Foos; about 5 minutes).
	FOO_TESTBIN="$$(hack/install-testbin.sh --print-dir)" FOO_ATTACK_FOOS=$(or $(ATTACK_FOOS),4000) \
	  go test -tags integration -count=1 -timeout 30m -run '^TestWebhookUnderAttack$$' -v ./pkg/integration/ \
	  | grep -E 'converged in|peak RSS|conversions meanwhile|^(--- |ok|FAIL)'

.PHONY: bench-cache
bench-cache: ## Bytes one Foo and one Deployment cost in the informer caches (no cluster; seconds).
	go test -run '^$$' -bench CachedBytes ./pkg/cachetrim/
	go test -run '^$$' -bench RecordBytes -benchtime 1x .

.PHONY: help
help:
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-12s %s\n", $$1, $$2}'
