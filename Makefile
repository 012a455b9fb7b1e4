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

.PHONY: generate
generate: ## Regenerate clientset, listers, informers, deepcopy and the CRD.
	hack/update-codegen.sh

.PHONY: verify
verify: ## Generated code up to date, gofmt, go vet, golangci-lint.
	hack/verify-codegen.sh
	@unformatted="$$(gofmt -l $$(git ls-files '*.go'))"; \
	  if [[ -n "$$unformatted" ]]; then echo "gofmt needed: $$unformatted"; exit 1; fi
	go vet ./...
	hack/lint.sh

.PHONY: test-unit
test-unit: ## Unit tests (fake clientsets, pure functions) with the race detector.
	go test -race $(GOTEST_FLAGS) ./...

.PHONY: test
test: test-unit ## Every test: unit, then integration on a real control plane.

.PHONY: help
help:
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-12s %s\n", $$1, $$2}'
