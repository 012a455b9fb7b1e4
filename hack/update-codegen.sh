#!/usr/bin/env bash
# Regenerates everything derived from the API types in pkg/apis:
#   - deepcopy and scheme registration (zz_generated.*.go, next to the types),
#   - the typed clientset, apply configurations, listers and informers
#     (pkg/generated), all with k8s.io/code-generator's kube_codegen.sh;
#   - the CRD manifest (artifacts/examples/crd.yaml) with controller-gen.
# Never edit those files by hand: change the types or their markers and rerun.
#
# Works from a clean clone anywhere: the generators come from the versions
# pinned in hack/tools/go.mod, found through the module cache, not from a
# GOPATH layout or a kubernetes checkout.
set -o errexit -o nounset -o pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${REPO_ROOT}"

MODULE="$(go list -m)"
TOOLS_MOD="${REPO_ROOT}/hack/tools"

# kube_codegen.sh `go install`s its generators into GOBIN; keep them out of
# the user's GOPATH/bin and out of the tree.
export GOBIN="${REPO_ROOT}/_output/bin"
mkdir -p "${GOBIN}"

go -C "${TOOLS_MOD}" mod download k8s.io/code-generator
CODEGEN_PKG="$(go -C "${TOOLS_MOD}" list -m -f '{{.Dir}}' k8s.io/code-generator)"
# shellcheck source=/dev/null
source "${CODEGEN_PKG}/kube_codegen.sh"

BOILERPLATE="${REPO_ROOT}/hack/boilerplate.go.txt"

kube::codegen::gen_helpers \
    --boilerplate "${BOILERPLATE}" \
    "${REPO_ROOT}/pkg/apis"

kube::codegen::gen_register \
    --boilerplate "${BOILERPLATE}" \
    "${REPO_ROOT}/pkg/apis"

kube::codegen::gen_client \
    --with-watch \
    --with-applyconfig \
    --output-dir "${REPO_ROOT}/pkg/generated" \
    --output-pkg "${MODULE}/pkg/generated" \
    --boilerplate "${BOILERPLATE}" \
    "${REPO_ROOT}/pkg/apis"

# The CRD: OpenAPI schema, defaults, CEL rules, subresources and printer
# columns all come from the markers in pkg/apis/samplecontroller/v1alpha1.
go -C "${TOOLS_MOD}" build -o "${GOBIN}/controller-gen" sigs.k8s.io/controller-tools/cmd/controller-gen
"${GOBIN}/controller-gen" crd \
    paths="./pkg/apis/..." \
    output:crd:stdout > "${REPO_ROOT}/artifacts/examples/crd.yaml.tmp"
mv "${REPO_ROOT}/artifacts/examples/crd.yaml.tmp" "${REPO_ROOT}/artifacts/examples/crd.yaml"
