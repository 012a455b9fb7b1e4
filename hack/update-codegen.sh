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
# columns all come from the markers in pkg/apis/samplecontroller/v1alpha1
# and v1beta1; the conversion stanza from below.
go -C "${TOOLS_MOD}" build -o "${GOBIN}/controller-gen" sigs.k8s.io/controller-tools/cmd/controller-gen
"${GOBIN}/controller-gen" crd \
    paths="./pkg/apis/..." \
    output:crd:stdout > "${REPO_ROOT}/artifacts/examples/crd.yaml.tmp"
# controller-gen has no marker for spec.conversion: it goes in here, right
# under the top-level spec:. A CRD serving two versions must never exist
# without it: strategy None would hand a v1alpha1 object to a v1beta1
# client with only its apiVersion changed. The clientConfig names the
# Service of artifacts/deploy; `make run`, the bench and the integration
# tests point it at their own webhook (a URL) after installing the CRD.
# The caBundle is left out: the controller injects it (pkg/webhook).
if grep -q '^  conversion:' "${REPO_ROOT}/artifacts/examples/crd.yaml.tmp"; then
    echo "update-codegen: controller-gen wrote spec.conversion itself: drop the stanza below" >&2
    exit 1
fi
awk '
    { print }
    /^spec:$/ && !done {
        print "  # Needs the webhook of artifacts/deploy (the Service below) running:"
        print "  # without it, requests in v1alpha1 fail, and so do server-side applies"
        print "  # to Foos written through v1alpha1, and reads of Foos still stored in"
        print "  # v1alpha1. make run and the tests point it at their own by URL."
        print "  conversion:"
        print "    strategy: Webhook"
        print "    webhook:"
        print "      clientConfig:"
        print "        service:"
        print "          name: foo-controller-webhook"
        print "          namespace: foo-system"
        print "          path: /convert"
        print "          port: 443"
        print "      conversionReviewVersions:"
        print "      - v1"
        done = 1
    }
    END { if (!done) { print "update-codegen: no top-level spec: in the CRD" > "/dev/stderr"; exit 1 } }
' "${REPO_ROOT}/artifacts/examples/crd.yaml.tmp" > "${REPO_ROOT}/artifacts/examples/crd.yaml.new"
rm "${REPO_ROOT}/artifacts/examples/crd.yaml.tmp"
mv "${REPO_ROOT}/artifacts/examples/crd.yaml.new" "${REPO_ROOT}/artifacts/examples/crd.yaml"
