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
# logs prefixed [replica-N], metrics (plain HTTP) and probes on :8080/:8081, :8090/:8091...,
# the conversion webhook on WEBHOOK_ADDR's port, +10, +20...
#
# The conversion webhook: make run WEBHOOK_ADDR=127.0.0.1:9543 (default
# 127.0.0.1:9443; ":9543" listens on every address) serves it there, and
# points the CRD at it, wherever the API server reaches this machine's
# loopback: on the local control plane, and on a cluster whose API server
# runs on this machine (below). Elsewhere (kind: its API server runs in a
# container) the CRD is applied as shipped, for artifacts/deploy's webhook.
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

# WEBHOOK_ADDR: HOST:PORT, HOST one the webhook's certificate is issued
# for outside a cluster (127.0.0.1, localhost), or none or 0.0.0.0 (every
# address); the CRD names https://127.0.0.1:PORT/convert either way.
webhook_addr="${WEBHOOK_ADDR:-127.0.0.1:9443}"
webhook_host="${webhook_addr%:*}"
webhook_port="${webhook_addr##*:}"
if [[ "${webhook_addr}" != *:* ]] || ! [[ "${webhook_host}" =~ ^(127\.0\.0\.1|localhost|0\.0\.0\.0|)$ ]] ||
    ! [[ "${webhook_port}" =~ ^[1-9][0-9]*$ ]] || ((webhook_port + 10 * (replicas - 1) > 65535)); then
    echo "run-local: WEBHOOK_ADDR must be HOST:PORT, HOST 127.0.0.1, localhost, or none or 0.0.0.0 (every address; the CRD names 127.0.0.1; the webhook's certificate is issued for 127.0.0.1 and localhost), PORT up to $((65535 - 10 * (replicas - 1))) (replica i serves on PORT+10i), got '${webhook_addr}'" >&2
    exit 2
fi

kubeconfig="${KUBECONFIG:-}"
for a in "${args[@]}"; do
    case "$a" in -kubeconfig=* | --kubeconfig=*) kubeconfig="${a#*=}" ;; esac
done

refuse_webhook_arg() {
    for a in "${args[@]}"; do
        case "${a}" in -webhook-bind-address* | --webhook-bind-address*)
            echo "run-local: here the webhook is served on WEBHOOK_ADDR (${webhook_addr}; replica i: its port+10i) and the CRD pointed at it; give no -webhook-bind-address in ARGS: make run WEBHOOK_ADDR=HOST:PORT" >&2
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
# The KUBECONFIG hack/local-up.sh wrote is the local plane too.
if [[ -z "${local_plane:-}" && "$(realpath -m "${kubeconfig}")" == "$(realpath -m "${FOO_LOCAL_DIR:-${TMPDIR:-/tmp}/foo-controller-local}/kubeconfig")" ]]; then
    local_plane=1
fi

# apiserver_on_this_host: the cluster's API server runs on this machine,
# so it reaches a webhook on this machine's 127.0.0.1; if not, it says why
# in not_here. Its URL on loopback is not enough: kind's kubeconfig
# (minikube's with the docker driver, Docker Desktop's) names 127.0.0.1
# too, a port forwarded into a container or VM whose 127.0.0.1 is its own.
# So it also asks the API servers where they run: each names its host in
# its identity Lease (kube-system, label kubernetes.io/hostname, since
# Kubernetes 1.26), which must be this machine's name for all of them.
not_here=""
apiserver_on_this_host() {
    local server host hosts h me
    server="$("${KUBECTL}" config view --minify -o jsonpath='{.clusters[0].cluster.server}' 2>/dev/null)" || true
    host="${server#*://}"
    host="${host%%/*}"
    [[ ! "${host}" =~ :[0-9]+$ ]] || host="${host%:*}"
    case "${host}" in
    127.* | localhost | "[::1]") ;;
    *)
        not_here="its URL (${server:-none}) is not on this machine's loopback"
        return 1
        ;;
    esac
    me="$(uname -n | tr '[:upper:]' '[:lower:]')"
    hosts="$("${KUBECTL}" get leases -n kube-system -l apiserver.kubernetes.io/identity=kube-apiserver \
        -o jsonpath='{range .items[*]}{.metadata.labels.kubernetes\.io/hostname}{"\n"}{end}' 2>/dev/null)" || true
    if [[ -z "${hosts}" ]]; then
        not_here="its URL is on loopback, but no API server identity Lease in kube-system says which host it runs on (or it may not be read): kind's runs in a container"
        return 1
    fi
    while read -r h; do
        if [[ "${h,,}" != "${me}" ]]; then
            not_here="it runs on host ${h}, its identity Lease in kube-system says, not on this one (${me}), though its URL is on loopback: kind's runs in a container"
            return 1
        fi
    done <<<"${hosts}"
}

# The CRD serves v1beta1 through the conversion webhook, which the shipped
# CRD expects behind the Service of artifacts/deploy. Where the API server
# reaches this machine's loopback (the local control plane; a cluster whose
# API server runs here, without artifacts/deploy's webhook, which the CRD
# keeps naming), each replica serves the webhook on WEBHOOK_ADDR's port
# +10i and the CRD names one of them by URL (the certificate's CA is
# injected by the controller). Elsewhere the CRD is applied as shipped:
# v1alpha1 needs artifacts/deploy's webhook running there.
webhook=""
if [[ -n "${local_plane:-}" ]]; then
    webhook=1
elif "${KUBECTL}" get service -n foo-system foo-controller-webhook >/dev/null 2>&1; then
    [[ -z "${WEBHOOK_ADDR:-}" ]] || echo "run-local: WEBHOOK_ADDR is not used: this cluster has artifacts/deploy's webhook (Service foo-system/foo-controller-webhook), which the CRD names" >&2
elif apiserver_on_this_host; then
    echo "run-local: this cluster's API server runs on this machine ($(uname -n)): serving the conversion webhook on ${webhook_addr} and pointing the CRD at it" >&2
    webhook=1
else
    [[ -z "${WEBHOOK_ADDR:-}" ]] || echo "run-local: WEBHOOK_ADDR is not used: this cluster's API server cannot reach a webhook on this machine's loopback: ${not_here}" >&2
    echo "run-local: WARNING: no Service foo-system/foo-controller-webhook in this cluster: the CRD's conversion webhook (artifacts/deploy) is not running there, so requests in v1alpha1 fail (v1beta1, the stored version and kubectl's default, works), and so do reads of Foos still stored in v1alpha1 (docs/evolving-the-api.md, section 9); install artifacts/deploy (docs/evolving-the-api.md, section 7)" >&2
fi
[[ -z "${webhook}" ]] || refuse_webhook_arg
webhook_url() { echo "https://127.0.0.1:$((webhook_port + 10 * $1))/convert"; }

go build -o _output/bin/foo-controller .
if [[ -n "${webhook}" ]]; then
    # The shipped clientConfig's service: block, replaced by a url:. First
    # on the CRD already there, if any: an apply (client- or server-side)
    # that removes the service another apply set, and sets the url, is
    # refused as holding both.
    "${KUBECTL}" patch crd foos.samplecontroller.example.com --type=merge \
        -p '{"spec":{"conversion":{"webhook":{"clientConfig":{"service":null,"url":"'"$(webhook_url 0)"'"}}}}}' >/dev/null 2>&1 || true
    awk -v url="$(webhook_url 0)" '
        /^        service:$/ && !done { print "        url: " url; skip = 1; done = 1; next }
        skip && /^          / { next }
        { skip = 0; print }
        END { if (!done) { print "run-local: no clientConfig.service in artifacts/examples/crd.yaml" > "/dev/stderr"; exit 1 } }
    ' artifacts/examples/crd.yaml | "${KUBECTL}" apply -f -
else
    "${KUBECTL}" apply -f artifacts/examples/crd.yaml
fi
"${KUBECTL}" wait --for=condition=Established crd/foos.samplecontroller.example.com --timeout=60s >/dev/null
"${KUBECTL}" apply -f artifacts/examples/v1alpha1-annotations-policy.yaml >/dev/null
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
webhook_arg() { [[ -z "${webhook}" ]] || echo "-webhook-bind-address=${webhook_host}:$((webhook_port + 10 * $1))"; }
if [[ "${replicas}" == 1 ]]; then
    # shellcheck disable=SC2046 # webhook_arg: one word or none
    # Metrics in plain HTTP on :8080, for curl (in a cluster they are
    # HTTPS behind a token: docs/operations.md); ARGS may say otherwise.
    _output/bin/foo-controller -metrics-bind-address=:8080 -metrics-secure=false "${args[@]}" $(webhook_arg 0)
    status=$?
else
    # Each in the background, in this shell's process group: Ctrl-C reaches
    # them all.
    pids=()
    for ((i = 0; i < replicas; i++)); do
        # shellcheck disable=SC2046 # webhook_arg: one word or none
        _output/bin/foo-controller "${args[@]}" $(webhook_arg "${i}") \
            -metrics-bind-address=":$((8080 + 10 * i))" -metrics-secure=false -health-probe-bind-address=":$((8081 + 10 * i))" \
            > >(sed -u "s/^/[replica-${i}] /" >&2) 2>&1 &
        pids+=("$!")
    done
    # A URL names one endpoint: the CRD names replica 0's webhook. Should
    # the replica it names stop while others run (a replica killed to
    # watch the others take its slots), the CRD is pointed at the first
    # one still running, else v1alpha1 would fail as with no webhook at
    # all; not on Ctrl-C, which stops them all.
    stopping=""
    trap 'stopping=1' INT
    named=0
    while :; do
        running=()
        for i in "${!pids[@]}"; do
            ! kill -0 "${pids[${i}]}" 2>/dev/null || running+=("${i}")
        done
        ((${#running[@]} > 0)) || break
        if [[ -n "${webhook}" && -z "${stopping}" ]] && ! kill -0 "${pids[${named}]}" 2>/dev/null; then
            named="${running[0]}"
            echo "run-local: replica ${named} now serves the CRD's conversion webhook ($(webhook_url "${named}")): the replica the CRD named has stopped" >&2
            "${KUBECTL}" patch crd foos.samplecontroller.example.com --type=merge \
                -p '{"spec":{"conversion":{"webhook":{"clientConfig":{"url":"'"$(webhook_url "${named}")"'"}}}}}' >/dev/null
        fi
        sleep 1
    done
    status=0
    for pid in "${pids[@]}"; do
        wait "${pid}" || status=$?
    done
fi
set -o errexit
# 130 = stopped by Ctrl-C in the shell's eyes; the controller itself exits 0.
exit "${status}"
