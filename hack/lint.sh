#!/usr/bin/env bash
# Runs the pinned golangci-lint (hack/tools/lint/go.mod) over the module
# and over the modules of its own in hack/: the bench's plots, the image builder.
set -o errexit -o nounset -o pipefail
REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BIN="${REPO_ROOT}/_output/bin"
mkdir -p "${BIN}"
# go build is incremental: after the first build this takes seconds.
go -C "${REPO_ROOT}/hack/tools/lint" build -o "${BIN}/golangci-lint" github.com/golangci/golangci-lint/v2/cmd/golangci-lint
cd "${REPO_ROOT}"
"${BIN}/golangci-lint" run --build-tags=integration ./...
(cd hack/plot && "${BIN}/golangci-lint" run ./...)
(cd hack/image && "${BIN}/golangci-lint" run ./...)
