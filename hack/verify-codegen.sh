#!/usr/bin/env bash
# Fails if any generated file differs from what hack/update-codegen.sh
# produces from the current types: regenerates in a scratch copy of the
# tree and compares, so the working tree is never touched.
set -o errexit -o nounset -o pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SCRATCH="$(mktemp -d)"
trap 'rm -rf "${SCRATCH}"' EXIT

# Copy the tree without .git and build outputs. tar keeps this independent
# of rsync being installed.
tar -C "${REPO_ROOT}" --exclude=./.git --exclude=./_output --exclude=./bin -cf - . | tar -C "${SCRATCH}" -xf -

"${SCRATCH}/hack/update-codegen.sh" >"${SCRATCH}/.codegen.log" 2>&1 || {
    cat "${SCRATCH}/.codegen.log" >&2
    echo "verify-codegen: hack/update-codegen.sh failed" >&2
    exit 1
}

status=0
for path in pkg/generated pkg/apis artifacts/examples/crd.yaml; do
    if ! diff -Naupr "${REPO_ROOT}/${path}" "${SCRATCH}/${path}"; then
        status=1
    fi
done
if [[ ${status} -ne 0 ]]; then
    echo "verify-codegen: generated files are out of date; run hack/update-codegen.sh" >&2
    exit 1
fi
echo "verify-codegen: generated files are up to date"
