#!/usr/bin/env bash
# `make run`: run the controller in the foreground against a cluster, with
# the CRD installed and the example Foo applied.
#
# With no cluster given (neither $KUBECONFIG nor -kubeconfig in ARGS), it
# builds the local control plane if needed (hack/install-testbin.sh: minutes
# on the first run, then cached), starts it (hack/local-up.sh), and stops it
# again when the controller exits: Ctrl-C stops both.
#
# Extra controller flags: make run ARGS="-workers=8 -v=4"
# Sharded replicas (docs/sharding.md): make run REPLICAS=2 starts two
# processes sharing 16 slots (-shard-slots=16 unless ARGS sets it; 0 is refused), their
# logs prefixed [replica-N], metrics and probes on :8080/:8081, :8090/:8091...,
# the conversion webhook (local control plane only) on 127.0.0.1:9443, :9453...
set -o errexit -o nounset -o pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${REPO_ROOT}"
read -r -a args <<<"${ARGS:--v=2}" # -v=2: log every change the controller makes

replicas="${REPLICAS:-1}"
if ! [[ "${replicas}" =~ ^[1-9][0-9]*$ ]]; then
    echo "run-local: REPLICAS must be a positive number, got '${replicas}'" >&2
    exit 2
fi
if [[ "${replicas}" != 1 ]]; then
    # Several replicas must share slots: one leader each would be unfenced
    # writers side by side (outside a cluster -leader-elect is off).
    slots=""
    for a in "${args[@]}"; do
        case "${a}" in
        -shard-slots=* | --shard-slots=*) slots="${a#*=}" ;;
        -shard-slots | --shard-slots | -metrics-bind-address* | --metrics-bind-address* | -health-probe-bind-address* | --health-probe-bind-address*)
            echo "run-local: with REPLICAS, give -shard-slots=N in ARGS (with '='), and no -metrics-bind-address or -health-probe-bind-address: replica i serves metrics on :8080+10i and probes on :8081+10i" >&2
            exit 2
            ;;
        esac
    done
    if [[ -z "${slots}" ]]; then
        args+=("-shard-slots=16")
    elif ! [[ "${slots}" =~ ^[1-9][0-9]*$ ]]; then
        echo "run-local: REPLICAS=${replicas} needs -shard-slots of at least 1, got '${slots}': replicas with -shard-slots=0 would each lead alone" >&2
        exit 2
    fi
fi

kubeconfig="${KUBECONFIG:-}"
for a in "${args[@]}"; do
    case "$a" in -kubeconfig=* | --kubeconfig=*) kubeconfig="${a#*=}" ;; esac
done

refuse_webhook_arg() {
    for a in "${args[@]}"; do
        case "${a}" in -webhook-bind-address* | --webhook-bind-address*)
            echo "run-local: on the local control plane the webhook is served on 127.0.0.1:9443 (replica i: 9443+10i) and the CRD pointed at it; give no -webhook-bind-address in ARGS" >&2
            exit 2
            ;;
        esac
    done
}
if [[ -z "${kubeconfig}" ]]; then
    refuse_webhook_arg
fi

BIN="$(hack/install-testbin.sh --print-dir)" # for kubectl
KUBECTL="${BIN}/kubectl"

if [[ -z "${kubeconfig}" ]]; then
    kubeconfig="${FOO_LOCAL_DIR:-${TMPDIR:-/tmp}/foo-controller-local}/kubeconfig"
    if [[ -f "${kubeconfig}" ]] && "${KUBECTL}" --kubeconfig="${kubeconfig}" get --raw=/readyz >/dev/null 2>&1; then
        # Someone (`make local-up`) started it: theirs to stop, not ours.
        echo "run-local: using the local control plane that is already running" >&2
    else
        echo "run-local: no KUBECONFIG given; starting the local control plane (hack/local-up.sh)" >&2
        hack/local-up.sh >&2
        # Stop it again however we leave: normal exit, error or Ctrl-C.
        trap 'echo "run-local: stopping the local control plane" >&2; hack/local-down.sh' EXIT
    fi
    args=("-kubeconfig=${kubeconfig}" "${args[@]}")
    local_plane=1
fi
export KUBECONFIG="${kubeconfig}"
# The KUBECONFIG hack/local-up.sh wrote is the local plane too, whose API
# server reaches a webhook on 127.0.0.1. Not any server on 127.0.0.1: kind's
# kubeconfig names one, but its API server runs in a container, where
# 127.0.0.1 is not this machine.
if [[ -z "${local_plane:-}" && "$(realpath -m "${kubeconfig}")" == "$(realpath -m "${FOO_LOCAL_DIR:-${TMPDIR:-/tmp}/foo-controller-local}/kubeconfig")" ]]; then
    refuse_webhook_arg
    local_plane=1
fi

# The CRD serves v1beta1 through the conversion webhook, which the shipped
# CRD expects behind the Service of artifacts/deploy. On the local control
# plane nothing routes to a Service: each replica serves the webhook on
# 127.0.0.1:9443+10i and the CRD names replica 0's by URL (the
# certificate's CA is injected by the controller). Against a cluster of
# your own, the CRD is applied as shipped: v1beta1 needs artifacts/deploy's
# webhook running there.
webhook=""
if [[ -n "${local_plane:-}" ]]; then
    webhook=1
elif ! "${KUBECTL}" get service -n foo-system foo-controller-webhook >/dev/null 2>&1; then
    echo "run-local: WARNING: no Service foo-system/foo-controller-webhook in this cluster: the CRD's conversion webhook (artifacts/deploy) is not running there, so requests in v1alpha1 fail (v1beta1, the stored version and kubectl's default, works), and so do reads of Foos still stored in v1alpha1 (docs/evolving-the-api.md, section 9); install artifacts/deploy (docs/evolving-the-api.md, section 7)" >&2
fi

go build -o _output/bin/foo-controller .
if [[ -n "${webhook}" ]]; then
    # The shipped clientConfig's service: block, replaced by a url:. First
    # on the CRD already there, if any: an apply (client- or server-side)
    # that removes the service another apply set, and sets the url, is
    # refused as holding both.
    "${KUBECTL}" patch crd foos.samplecontroller.example.com --type=merge \
        -p '{"spec":{"conversion":{"webhook":{"clientConfig":{"service":null,"url":"https://127.0.0.1:9443/convert"}}}}}' >/dev/null 2>&1 || true
    awk '
        /^        service:$/ && !done { print "        url: https://127.0.0.1:9443/convert"; skip = 1; done = 1; next }
        skip && /^          / { next }
        { skip = 0; print }
        END { if (!done) { print "run-local: no clientConfig.service in artifacts/examples/crd.yaml" > "/dev/stderr"; exit 1 } }
    ' artifacts/examples/crd.yaml | "${KUBECTL}" apply -f -
else
    "${KUBECTL}" apply -f artifacts/examples/crd.yaml
fi
"${KUBECTL}" wait --for=condition=Established crd/foos.samplecontroller.example.com --timeout=60s >/dev/null
"${KUBECTL}" apply -f artifacts/examples/example-foo.yaml

cat >&2 <<MSG

run-local: starting foo-controller (Ctrl-C to stop). In another terminal:
    export KUBECONFIG=${KUBECONFIG} PATH=${BIN}:\$PATH
    kubectl get foos -w                      # watch example-foo reach Ready=True
    kubectl get deploy,pods -l app.kubernetes.io/managed-by=foo-controller
    kubectl scale foo/example-foo --replicas=3
    kubectl describe foo example-foo         # status, conditions and Events
    kubectl get foos.v1alpha1.samplecontroller.example.com example-foo -o yaml  # the same Foo in v1alpha1, converted by the webhook

MSG
# Not exec: the EXIT trap must still run after the controller stops.
# Ctrl-C reaches the controller too, which finishes in-flight syncs first.
set +o errexit
webhook_arg() { [[ -z "${webhook}" ]] || echo "-webhook-bind-address=127.0.0.1:$((9443 + 10 * $1))"; }
if [[ "${replicas}" == 1 ]]; then
    # shellcheck disable=SC2046 # webhook_arg: one word or none
    _output/bin/foo-controller "${args[@]}" $(webhook_arg 0)
    status=$?
else
    # Each in the background, in this shell's process group: Ctrl-C reaches
    # them all, and wait returns once every one has stopped.
    pids=()
    for ((i = 0; i < replicas; i++)); do
        # shellcheck disable=SC2046 # webhook_arg: one word or none
        _output/bin/foo-controller "${args[@]}" $(webhook_arg "${i}") \
            -metrics-bind-address=":$((8080 + 10 * i))" -health-probe-bind-address=":$((8081 + 10 * i))" \
            > >(sed -u "s/^/[replica-${i}] /" >&2) 2>&1 &
        pids+=("$!")
    done
    status=0
    for pid in "${pids[@]}"; do
        wait "${pid}" || status=$?
    done
fi
set -o errexit
# 130 = stopped by Ctrl-C in the shell's eyes; the controller itself exits 0.
exit "${status}"
