#!/usr/bin/env bash
# Start a small but real Kubernetes control plane on 127.0.0.1, in the
# background, for running and testing foo-controller locally:
#
#   etcd -> kube-apiserver -> kube-controller-manager + kube-scheduler
#        -> kwok (a fake kubelet) with a few fake nodes
#
# Pods are scheduled by the real scheduler and then "run" by kwok, which only
# writes their status (Running/Ready) - no containers, no images, no network.
# Everything binds to loopback only. Stop it with hack/local-down.sh.
#
# State (etcd data, certs, kubeconfigs, logs/, pids/) lives in
#   FOO_LOCAL_DIR   (default: ${TMPDIR:-/tmp}/foo-controller-local)
# and the admin kubeconfig is written to $FOO_LOCAL_DIR/kubeconfig.
#
# Other knobs (environment):
#   FOO_ETCD_PORT=23790 FOO_ETCD_PEER_PORT=23800   etcd client/peer ports
#   FOO_APISERVER_PORT=6443                        kube-apiserver secure port
#   FOO_KCM_PORT=10257 FOO_SCHEDULER_PORT=10259    health/metrics ports
#   FOO_KUBE_API_QPS=200 FOO_KUBE_API_BURST=400    client rate limits of
#                                                  controller-manager+scheduler
#   FOO_KWOK_NODES=3                               number of fake nodes
#   FOO_APISERVER_FEATURE_GATES=ShardedListAndWatch=true
#                                                  kube-apiserver's --feature-gates
#   FOO_KCM_WITHOUT                                controllers to leave out of
#                                                  kube-controller-manager's list
#                                                  (below), comma-separated; the
#                                                  bench's -deployment-controller=false
#                                                  leaves out deployment-controller,
#                                                  replicaset-controller
#   FOO_LOCAL_TIMEOUT=120                          seconds to wait per step
#   FOO_LOCAL_KEEP_ON_FAILURE=1                    on failure, leave the started
#                                                  components running (to debug)
#   FOO_TESTBIN_DIR                                binaries (see install-testbin.sh)
set -euo pipefail

REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
STATE_DIR="${FOO_LOCAL_DIR:-${TMPDIR:-/tmp}/foo-controller-local}"
ETCD_PORT="${FOO_ETCD_PORT:-23790}"
ETCD_PEER_PORT="${FOO_ETCD_PEER_PORT:-23800}"
APISERVER_PORT="${FOO_APISERVER_PORT:-6443}"
KCM_PORT="${FOO_KCM_PORT:-10257}"
SCHEDULER_PORT="${FOO_SCHEDULER_PORT:-10259}"
KUBE_API_QPS="${FOO_KUBE_API_QPS:-200}"
KUBE_API_BURST="${FOO_KUBE_API_BURST:-400}"
KWOK_NODES="${FOO_KWOK_NODES:-3}"
KCM_CONTROLLERS=deployment-controller,replicaset-controller,garbage-collector-controller,namespace-controller,serviceaccount-controller,root-ca-certificate-publisher-controller,pod-garbage-collector-controller,node-lifecycle-controller,storage-version-migrator-controller
FOO_KCM_WITHOUT="${FOO_KCM_WITHOUT:-}"
for c in ${FOO_KCM_WITHOUT//,/ }; do
  [[ ",$KCM_CONTROLLERS," == *",$c,"* ]] || { printf 'local-up: FOO_KCM_WITHOUT names %s, which is not in the list\n' "$c" >&2; exit 1; }
  KCM_CONTROLLERS=$(printf '%s' ",$KCM_CONTROLLERS," | sed "s/,$c,/,/; s/^,//; s/,\$//")
done
APISERVER_FEATURE_GATES="${FOO_APISERVER_FEATURE_GATES:-ShardedListAndWatch=true}"
# What a running control plane must have been started with to be reused.
SETTINGS="kcm-controllers=$KCM_CONTROLLERS apiserver-feature-gates=$APISERVER_FEATURE_GATES kube-api-qps=$KUBE_API_QPS kube-api-burst=$KUBE_API_BURST"
TIMEOUT="${FOO_LOCAL_TIMEOUT:-120}"

# Components in start order; local-down.sh stops them in reverse.
COMPONENTS=(etcd kube-apiserver kube-controller-manager kube-scheduler kwok)

CERTS="$STATE_DIR/certs"
LOGS="$STATE_DIR/logs"
PIDS="$STATE_DIR/pids"
KUBECONFIG_ADMIN="$STATE_DIR/kubeconfig"

log() { printf 'local-up: %s\n' "$*" >&2; }
die() { printf 'local-up: ERROR: %s\n' "$*" >&2; exit 1; }

# Fail with the tail of the component's log: that is almost always where
# the reason is (bad flag, port in use, cert problem...).
fail_component() { # fail_component <component> <message>
  printf 'local-up: ERROR: %s: %s\n' "$1" "$2" >&2
  if [[ -f "$LOGS/$1.log" ]]; then
    printf -- '----- last 30 lines of %s -----\n' "$LOGS/$1.log" >&2
    tail -n 30 "$LOGS/$1.log" >&2
    printf -- '-----\n' >&2
  fi
  # Don't leave half a control plane behind (logs and state are kept).
  if [[ "${FOO_LOCAL_KEEP_ON_FAILURE:-}" == 1 ]]; then
    printf 'local-up: FOO_LOCAL_KEEP_ON_FAILURE=1: leaving the rest running; stop it with hack/local-down.sh\n' >&2
  else
    "$REPO_ROOT/hack/local-down.sh" >&2 || true
  fi
  exit 1
}

# A pid file only counts if that pid is still the binary we started (pids are
# reused). `comm` is the process name, cut to 15 characters by the kernel.
pid_alive() { # pid_alive <component>
  local f="$PIDS/$1.pid" pid
  [[ -f "$f" ]] || return 1
  pid=$(cat "$f")
  [[ "$(ps -o comm= -p "$pid" 2>/dev/null)" == "${1:0:15}" ]]
}

port_in_use() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

KUBECTL=() # set once the binaries are installed
ready_apiserver() { "${KUBECTL[@]}" get --raw=/readyz >/dev/null 2>&1; }

# ---------------------------------------------------------------------------
# Already running from this state dir? Reuse it if healthy, refuse if broken.
running=()
for c in "${COMPONENTS[@]}"; do pid_alive "$c" && running+=("$c"); done
if ((${#running[@]} > 0)); then
  if ((${#running[@]} == ${#COMPONENTS[@]})); then
    BIN=$("$REPO_ROOT/hack/install-testbin.sh" --print-dir)
    KUBECTL=("$BIN/kubectl" --kubeconfig="$KUBECONFIG_ADMIN")
    ready_apiserver || die "a control plane is running from $STATE_DIR but its apiserver is not ready; see $LOGS/ or run hack/local-down.sh"
    # Reused as it was started: refuse if asked for other settings.
    [[ "$(cat "$STATE_DIR/settings" 2>/dev/null)" == "$SETTINGS" ]] ||
      die "a control plane is running from $STATE_DIR with other settings ($(cat "$STATE_DIR/settings" 2>/dev/null || echo unknown)) than asked ($SETTINGS); run hack/local-down.sh first"
    log "a local control plane is already running from $STATE_DIR; reusing it"
    echo "# reused: a control plane that was already running"
    echo "export KUBECONFIG=$KUBECONFIG_ADMIN"
    exit 0
  fi
  die "a partial control plane is running from $STATE_DIR (${running[*]}); run hack/local-down.sh first"
fi

for p in "$ETCD_PORT" "$ETCD_PEER_PORT" "$APISERVER_PORT" "$KCM_PORT" "$SCHEDULER_PORT"; do
  port_in_use "$p" && die "port 127.0.0.1:$p is already in use; stop whatever uses it or override the FOO_*_PORT variables (see the top of $0)"
done

command -v openssl >/dev/null ||
  die "openssl is needed to generate the certificates; install it (Debian/Ubuntu: apt-get install -y openssl)"

start_time=$SECONDS
BIN=$("$REPO_ROOT/hack/install-testbin.sh" --print-dir)
KUBECTL=("$BIN/kubectl" --kubeconfig="$KUBECONFIG_ADMIN")

mkdir -p "$CERTS" "$LOGS" "$PIDS" "$STATE_DIR/etcd" "$STATE_DIR/kwok"
printf '%s\n' "$SETTINGS" >"$STATE_DIR/settings"
chmod 0700 "$STATE_DIR" "$CERTS"
# local-down.sh --clean only deletes a directory carrying this marker.
touch "$STATE_DIR/.foo-controller-local"

# ---------------------------------------------------------------------------
# Certificates. One CA signs everything: the apiserver's serving cert and a
# client cert per identity. Kubernetes maps a client cert's CN to the user
# name and its O fields to groups. Existing certs are kept, so a stop/start
# cycle keeps old kubeconfigs working.
# (They are valid for a year; `local-down.sh --clean` starts over.)
# openssl is chatty on stderr; show its output only when it fails.
quiet() {
  local out
  out=$("$@" 2>&1) || die "'$*' failed:
$out"
}
gen_cert() { # gen_cert <name> <subject> <extensions>
  local name=$1 subj=$2 ext=$3
  [[ -f "$CERTS/$name.crt" ]] && return 0
  quiet openssl req -new -newkey rsa:2048 -nodes -keyout "$CERTS/$name.key" \
    -subj "$subj" -out "$CERTS/$name.csr"
  printf '%s\n' "$ext" >"$CERTS/$name.ext"
  quiet openssl x509 -req -in "$CERTS/$name.csr" -CA "$CERTS/ca.crt" -CAkey "$CERTS/ca.key" \
    -CAcreateserial -days 365 -sha256 -extfile "$CERTS/$name.ext" -out "$CERTS/$name.crt"
  rm -f "$CERTS/$name.csr" "$CERTS/$name.ext"
}

if [[ ! -f "$CERTS/ca.crt" ]]; then
  log "generating certificates and keys in $CERTS"
  quiet openssl req -x509 -newkey rsa:2048 -nodes -days 365 -sha256 \
    -keyout "$CERTS/ca.key" -out "$CERTS/ca.crt" -subj "/CN=foo-controller-local-ca" \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign"
fi
client_ext="basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=clientAuth"
# The serving cert names loopback plus the in-cluster names of the
# "kubernetes" Service (10.96.0.1 is the first IP of the service range below).
gen_cert apiserver "/CN=kube-apiserver" "basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth
subjectAltName=IP:127.0.0.1,DNS:localhost,IP:10.96.0.1,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
# kube-controller-manager and kube-scheduler serve /healthz and /metrics over
# HTTPS too; certs from our CA let local-up.sh check them with verified TLS.
for c in kube-controller-manager kube-scheduler; do
  gen_cert "$c-serving" "/CN=$c" "basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth
subjectAltName=IP:127.0.0.1,DNS:localhost"
done
# The apiserver authenticates itself with this cert when it proxies to
# aggregated API servers and components that delegate authentication
# (controller-manager, scheduler, metrics-server) trust that CN. Without it
# those components log "missing content for CA bundle ... requestheader".
gen_cert front-proxy-client "/CN=front-proxy-client" "$client_ext"
# Admin: group system:masters is bound to cluster-admin by RBAC's bootstrap policy.
gen_cert admin "/O=system:masters/CN=foo-admin" "$client_ext"
# These user names have bootstrap ClusterRoles (system:kube-controller-manager,
# system:kube-scheduler) with just the permissions those components need.
gen_cert kube-controller-manager "/CN=system:kube-controller-manager" "$client_ext"
gen_cert kube-scheduler "/CN=system:kube-scheduler" "$client_ext"
# kwok writes status for nodes, pods and leases across the whole cluster
# (the job of every kubelet at once); like kwokctl, give it admin rights.
gen_cert kwok "/O=system:masters/CN=kwok-controller" "$client_ext"

# Service-account token signing key pair: the apiserver signs tokens with the
# private key (TokenRequest, `kubectl create token`) and verifies with the public one.
if [[ ! -f "$CERTS/sa.key" ]]; then
  quiet openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out "$CERTS/sa.key"
  quiet openssl pkey -in "$CERTS/sa.key" -pubout -out "$CERTS/sa.pub"
fi

# One kubeconfig per identity, with the certs embedded so the files are
# self-contained.
write_kubeconfig() { # write_kubeconfig <file> <cert name>
  local kc=$1
  "$BIN/kubectl" config --kubeconfig="$kc" set-cluster local --server="https://127.0.0.1:$APISERVER_PORT" \
    --certificate-authority="$CERTS/ca.crt" --embed-certs=true >/dev/null
  "$BIN/kubectl" config --kubeconfig="$kc" set-credentials "$2" \
    --client-certificate="$CERTS/$2.crt" --client-key="$CERTS/$2.key" --embed-certs=true >/dev/null
  "$BIN/kubectl" config --kubeconfig="$kc" set-context local --cluster=local --user="$2" >/dev/null
  "$BIN/kubectl" config --kubeconfig="$kc" use-context local >/dev/null
  chmod 0600 "$kc"
}
# Rewritten every time: the apiserver port may have changed.
write_kubeconfig "$KUBECONFIG_ADMIN" admin
for id in kube-controller-manager kube-scheduler kwok; do
  write_kubeconfig "$STATE_DIR/$id.kubeconfig" "$id"
done

# ---------------------------------------------------------------------------
# start <component> <args...>: run the binary in the background with its own
# log file and pid file; it outlives this script until local-down.sh stops it.
# setsid puts it in a session of its own, so that no terminal signal reaches
# it: a Ctrl-C meant for whatever started local-up.sh (make bench, make run)
# would otherwise reach every component at once, and the caller could not
# clean up (delete its namespaces) through an API server already gone. Only
# local-down.sh stops the plane. setsid and nohup exec (the shell's
# background child is not a group leader, so setsid needs no fork): the pid
# written is the binary's.
# A Ctrl-C while components start (they no longer see it themselves) stops
# what was started, as a failed start does; cleared once the plane is up.
trap 'printf "local-up: interrupted: stopping what was started\n" >&2; "$REPO_ROOT/hack/local-down.sh" >&2 || true; exit 130' INT TERM
start() {
  local c=$1; shift
  log "starting $c (log: $LOGS/$c.log)"
  setsid nohup "$BIN/$c" "$@" >"$LOGS/$c.log" 2>&1 </dev/null &
  echo $! >"$PIDS/$c.pid"
}

# wait_for <component> <description> <command...>: poll until the command
# succeeds; fail fast if the process died, or after $TIMEOUT seconds.
wait_for() {
  local c=$1 what=$2; shift 2
  local deadline=$((SECONDS + TIMEOUT))
  until "$@" >/dev/null 2>&1; do
    # kill -0 rather than pid_alive: just after the start the process may
    # still be called "nohup".
    kill -0 "$(cat "$PIDS/$c.pid")" 2>/dev/null || fail_component "$c" "exited while waiting for $what"
    ((SECONDS < deadline)) || fail_component "$c" "timed out after ${TIMEOUT}s waiting for $what"
    sleep 0.5
  done
}

# /healthz of another server, with the admin credentials: controller-manager
# and scheduler delegate authentication to the apiserver, so they accept it.
healthz() { "${KUBECTL[@]}" --server="https://127.0.0.1:$1" get --raw=/healthz; }

# --- etcd -------------------------------------------------------------------
# Plain HTTP is fine: it listens on loopback only and only the apiserver talks
# to it. --unsafe-no-fsync trades crash safety (irrelevant for throwaway test
# state) for much faster writes. --quota-backend-bytes raises etcd's 2 GiB
# default, which a bench of 100,000 Foos (with their Deployments,
# ReplicaSets and Events, twice over with the floor's) could fill.
start etcd \
  --name=local \
  --data-dir="$STATE_DIR/etcd" \
  --listen-client-urls="http://127.0.0.1:$ETCD_PORT" \
  --advertise-client-urls="http://127.0.0.1:$ETCD_PORT" \
  --listen-peer-urls="http://127.0.0.1:$ETCD_PEER_PORT" \
  --initial-advertise-peer-urls="http://127.0.0.1:$ETCD_PEER_PORT" \
  --initial-cluster="local=http://127.0.0.1:$ETCD_PEER_PORT" \
  --unsafe-no-fsync=true \
  --quota-backend-bytes=$((8 << 30))
wait_for etcd "port $ETCD_PORT" port_in_use "$ETCD_PORT"

# --- kube-apiserver ---------------------------------------------------------
# --authorization-mode=Node,RBAC: as in a kubeadm cluster, so that foo's RBAC
#   manifests are exercised for real (nothing is allowed by default).
# --endpoint-reconciler-type=none: the apiserver would otherwise publish its
#   loopback address as the endpoint of the "kubernetes" Service, which
#   Endpoints validation rejects (loopback isn't allowed) - nothing in this
#   setup reaches the apiserver through that Service anyway.
# --feature-gates=ShardedListAndWatch=true: server-side sharded lists and
#   watches (alpha in 1.36, KEP-5866), for foo-controller's sharded
#   mode, being built (docs/sharding.md); FOO_APISERVER_FEATURE_GATES
#   overrides it (=false: the API server ignores shard selectors).
# StorageVersionMigrator=true, --runtime-config=storagemigration...: the API
#   server's own migration of stored objects to a new storage version (beta
#   in 1.36, off by default), which `make migrate-storage` uses where served
#   (docs/evolving-the-api.md, section 8); kube-controller-manager runs it.
start kube-apiserver \
  --feature-gates="$APISERVER_FEATURE_GATES,StorageVersionMigrator=true" \
  --runtime-config=storagemigration.k8s.io/v1beta1=true \
  --bind-address=127.0.0.1 \
  --advertise-address=127.0.0.1 \
  --secure-port="$APISERVER_PORT" \
  --etcd-servers="http://127.0.0.1:$ETCD_PORT" \
  --tls-cert-file="$CERTS/apiserver.crt" \
  --tls-private-key-file="$CERTS/apiserver.key" \
  --client-ca-file="$CERTS/ca.crt" \
  --authorization-mode=Node,RBAC \
  --service-account-issuer=https://kubernetes.default.svc.cluster.local \
  --service-account-key-file="$CERTS/sa.pub" \
  --service-account-signing-key-file="$CERTS/sa.key" \
  --service-cluster-ip-range=10.96.0.0/16 \
  --endpoint-reconciler-type=none \
  --allow-privileged=true \
  --requestheader-client-ca-file="$CERTS/ca.crt" \
  --requestheader-allowed-names=front-proxy-client \
  --requestheader-username-headers=X-Remote-User \
  --requestheader-group-headers=X-Remote-Group \
  --requestheader-extra-headers-prefix=X-Remote-Extra- \
  --proxy-client-cert-file="$CERTS/front-proxy-client.crt" \
  --proxy-client-key-file="$CERTS/front-proxy-client.key"
wait_for kube-apiserver "/readyz" ready_apiserver

# --- kube-controller-manager ------------------------------------------------
# Only the controllers foo-controller's world needs (fewer controllers = less
# CPU and log noise on a 2-core machine):
#   deployment, replicaset       Deployment -> ReplicaSet -> Pods
#   garbage-collector            ownerReferences: deleting a Deployment
#                                deletes its ReplicaSets and Pods
#   namespace                    empties and removes deleted namespaces
#   serviceaccount               creates the "default" ServiceAccount per
#                                namespace; without it pods are rejected
#   root-ca-certificate-publisher  the kube-root-ca.crt ConfigMap that
#                                projected SA token volumes mount
#   pod-garbage-collector        cleans up pods bound to deleted nodes
#   node-lifecycle               the apiserver taints every new node
#                                "not-ready:NoSchedule"; this controller lifts
#                                the taint once the node is Ready (and puts it
#                                back if kwok stops renewing the node Leases).
#                                Without it no pod ever schedules.
#   storage-version-migrator     runs StorageVersionMigrations (the API
#                                server's, above; it needs the garbage
#                                collector's graph)
# --use-service-account-credentials: each controller runs as its own
#   ServiceAccount with its own bootstrap RBAC role (like kubeadm), instead of
#   all of them sharing the controller-manager's identity.
start kube-controller-manager \
  --kubeconfig="$STATE_DIR/kube-controller-manager.kubeconfig" \
  --authentication-kubeconfig="$STATE_DIR/kube-controller-manager.kubeconfig" \
  --authorization-kubeconfig="$STATE_DIR/kube-controller-manager.kubeconfig" \
  --bind-address=127.0.0.1 \
  --secure-port="$KCM_PORT" \
  --tls-cert-file="$CERTS/kube-controller-manager-serving.crt" \
  --tls-private-key-file="$CERTS/kube-controller-manager-serving.key" \
  --leader-elect=false \
  --controllers="$KCM_CONTROLLERS" \
  --feature-gates=StorageVersionMigrator=true \
  --use-service-account-credentials=true \
  --root-ca-file="$CERTS/ca.crt" \
  --kube-api-qps="$KUBE_API_QPS" \
  --kube-api-burst="$KUBE_API_BURST"

# --- kube-scheduler ---------------------------------------------------------
# Its rate limits and leader election are only settable in a config file
# (the equivalent flags are deprecated and ignored when --config is given).
cat >"$STATE_DIR/kube-scheduler.yaml" <<EOF
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection:
  kubeconfig: $STATE_DIR/kube-scheduler.kubeconfig
  qps: $KUBE_API_QPS
  burst: $KUBE_API_BURST
leaderElection:
  leaderElect: false
EOF
start kube-scheduler \
  --config="$STATE_DIR/kube-scheduler.yaml" \
  --authentication-kubeconfig="$STATE_DIR/kube-scheduler.kubeconfig" \
  --authorization-kubeconfig="$STATE_DIR/kube-scheduler.kubeconfig" \
  --bind-address=127.0.0.1 \
  --secure-port="$SCHEDULER_PORT" \
  --tls-cert-file="$CERTS/kube-scheduler-serving.crt" \
  --tls-private-key-file="$CERTS/kube-scheduler-serving.key"

# --- kwok (fake kubelet) ----------------------------------------------------
# kwok does nothing without "stages" (rules that move nodes/pods from one
# status to the next). install-testbin.sh ships the "fast" set from the
# pinned kwok module: nodes become Ready at once and keep a Lease (heartbeat),
# pods become Running+Ready at once, deleted pods go away at once.
# --manage-nodes-with-annotation-selector: only nodes created below are
#   faked, never a node created by someone else.
# --node-lease-duration-seconds: keep node Leases alive, as a kubelet does.
# --cidr: fallback pod IP range; each node below has its own podCIDR.
# KWOK_WORKDIR: keep kwok away from a ~/.kwok/kwok.yaml of the user's.
node_names=()
for i in $(seq 1 "$KWOK_NODES"); do node_names+=("kwok-node-$i"); done
# On a restart with kept state, the node Leases still name the previous kwok
# process (each run has a new random identity), and the new one would leave
# the nodes alone until those Leases expire (~40s). Nobody else renews them
# (we checked that no kwok of ours runs), so drop them.
"${KUBECTL[@]}" -n kube-node-lease delete lease "${node_names[@]}" --ignore-not-found >/dev/null
KWOK_WORKDIR="$STATE_DIR/kwok" start kwok \
  --kubeconfig="$STATE_DIR/kwok.kubeconfig" \
  --config="$BIN/kwok-stages.yaml" \
  --manage-all-nodes=false \
  --manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake \
  --node-lease-duration-seconds=40 \
  --cidr=127.100.0.0/16

# Controller-manager and scheduler health, now that both had time to start.
wait_for kube-controller-manager "https://127.0.0.1:$KCM_PORT/healthz" healthz "$KCM_PORT"
wait_for kube-scheduler "https://127.0.0.1:$SCHEDULER_PORT/healthz" healthz "$SCHEDULER_PORT"

# --- fake nodes -------------------------------------------------------------
# Node objects are created by us (a real kubelet registers itself); the
# annotation hands them to kwok. Capacity is large so a few thousand pods fit,
# and there are no taints, so ordinary pods schedule onto them. Addresses are
# loopback on purpose: nothing ever sends traffic to a fake node or pod
# (there is no kube-proxy or real kubelet), and if something tried, it would
# stay on this machine.
nodes_yaml=""
for i in $(seq 1 "$KWOK_NODES"); do
  nodes_yaml+="---
apiVersion: v1
kind: Node
metadata:
  name: kwok-node-$i
  annotations:
    kwok.x-k8s.io/node: fake
    node.alpha.kubernetes.io/ttl: \"0\"
  labels:
    type: kwok
    kubernetes.io/hostname: kwok-node-$i
    kubernetes.io/os: linux
    kubernetes.io/arch: amd64
    node-role.kubernetes.io/agent: \"\"
spec:
  podCIDR: 127.$((100 + i)).0.0/16
  podCIDRs: [127.$((100 + i)).0.0/16]
status:
  addresses:
  - {type: InternalIP, address: 127.0.1.$i}
  - {type: Hostname, address: kwok-node-$i}
  allocatable: {cpu: \"1000\", memory: 4Ti, pods: \"5000\"}
  capacity: {cpu: \"1000\", memory: 4Ti, pods: \"5000\"}
  nodeInfo: {architecture: amd64, operatingSystem: linux}
"
done
# A restart with kept state and a smaller FOO_KWOK_NODES: remove the extra
# nodes, or pods could land on nodes that nobody fakes any more.
for n in $("${KUBECTL[@]}" get node -l type=kwok -o name); do
  [[ " ${node_names[*]} " == *" ${n#node/} "* ]] || "${KUBECTL[@]}" delete "$n" >/dev/null
done
# apply (not create) so that a restart with kept state is a no-op.
"${KUBECTL[@]}" apply -f - <<<"$nodes_yaml" >/dev/null ||
  die "could not create the fake nodes (see the kubectl error above)"

# A fresh Lease per node shows that this kwok process manages it.
wait_for kwok "kwok to take the nodes' Leases" \
  "${KUBECTL[@]}" -n kube-node-lease get lease "${node_names[@]}"
wait_for kwok "the kwok nodes to be Ready" \
  "${KUBECTL[@]}" wait --for=condition=Ready node "${node_names[@]}" --timeout=2s
no_node_taints() {
  [[ -z "$("${KUBECTL[@]}" get node "${node_names[@]}" -o jsonpath='{.items[*].spec.taints}')" ]]
}
wait_for kube-controller-manager "the not-ready taint to be removed from the nodes" no_node_taints
# Pods are only admitted once their namespace has a "default" ServiceAccount.
wait_for kube-controller-manager "the default ServiceAccount" \
  "${KUBECTL[@]}" -n default get serviceaccount default

# ---------------------------------------------------------------------------
cat >&2 <<EOF

local control plane is up in $((SECONDS - start_time))s (state: $STATE_DIR)
  etcd                     http://127.0.0.1:$ETCD_PORT
  kube-apiserver           https://127.0.0.1:$APISERVER_PORT
  kube-controller-manager  https://127.0.0.1:$KCM_PORT/healthz
  kube-scheduler           https://127.0.0.1:$SCHEDULER_PORT/healthz
  kwok                     $KWOK_NODES fake nodes (kubectl get nodes -l type=kwok)
  logs                     $LOGS/<component>.log
  binaries                 $BIN
Stop with: $REPO_ROOT/hack/local-down.sh [--clean]
To use it:
EOF
trap - INT TERM
# The only line on stdout, so `eval "$(hack/local-up.sh)"` works.
echo "export KUBECONFIG=$KUBECONFIG_ADMIN"
