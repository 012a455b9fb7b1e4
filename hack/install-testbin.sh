#!/usr/bin/env bash
# Build the binaries of a real, local Kubernetes control plane from Go modules
# and install them into a per-version cache directory outside the repo:
#
#   etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubectl, kwok
#
# The versions are pinned in hack/testbin/go.mod (one place). The cache
# directory name contains a hash of that go.mod/go.sum, so changing a version
# gives a new directory and a rebuild, while an unchanged pin is a no-op that
# takes well under a second.
#
# Usage:
#   hack/install-testbin.sh              # install if needed, report where
#   hack/install-testbin.sh --print-dir  # same, but stdout is ONLY the bin dir
#                                        # (progress goes to stderr), e.g.
#                                        #   TESTBIN=$(hack/install-testbin.sh --print-dir)
#
# Environment:
#   FOO_TESTBIN_DIR  use exactly this bin directory instead of the cache
#   XDG_CACHE_HOME   base of the default cache (default: ~/.cache)
set -euo pipefail

# Bump when the way we build changes (flags, ldflags, binary list), so that
# existing caches are rebuilt even though go.mod did not change.
RECIPE=1

BINARIES=(etcd kube-apiserver kube-controller-manager kube-scheduler kubectl kwok)

log() { printf '%s\n' "$*" >&2; }
die() { printf 'install-testbin: ERROR: %s\n' "$*" >&2; exit 1; }

print_dir=false
case "${1:-}" in
  --print-dir) print_dir=true ;;
  "") ;;
  -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
  *) die "unknown argument: $1 (try --help)" ;;
esac

# Resolve paths from the script's own location so it works from any cwd.
REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TOOLS_DIR="$REPO_ROOT/hack/testbin"
[[ -f "$TOOLS_DIR/go.mod" && -f "$TOOLS_DIR/go.sum" ]] || die "missing $TOOLS_DIR/go.mod or go.sum"
command -v go >/dev/null || die "'go' is not on PATH; install Go first (see hack/testbin/go.mod for the version)"

# Pinned versions, read from the tools go.mod (only used for names/messages).
pinned() { awk -v m="$1" '$1 == m && $2 ~ /^v/ { print $2; exit }' "$TOOLS_DIR/go.mod"; }
K8S_VERSION=$(pinned k8s.io/kubernetes)
ETCD_VERSION=$(pinned go.etcd.io/etcd/server/v3)
KWOK_VERSION=$(pinned sigs.k8s.io/kwok)
[[ -n "$K8S_VERSION" && -n "$ETCD_VERSION" && -n "$KWOK_VERSION" ]] ||
  die "could not read the pinned versions from $TOOLS_DIR/go.mod"

# Cache key: readable versions + a short hash of everything that determines
# the binaries' content. Comments in go.mod are left out of the hash so that
# editing them doesn't cost a rebuild.
hash=$( { sed 's|//.*||' "$TOOLS_DIR/go.mod"; cat "$TOOLS_DIR/go.sum"; echo "recipe=$RECIPE"; } | sha256sum | cut -c1-12)
KEY="k8s-$K8S_VERSION-etcd-$ETCD_VERSION-kwok-$KWOK_VERSION-$hash"
BIN_DIR="${FOO_TESTBIN_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/foo-controller/testbin/$KEY}"
STAMP="$BIN_DIR/.installed"

finish() {
  if $print_dir; then
    printf '%s\n' "$BIN_DIR"
  else
    log "testbin ready: $BIN_DIR"
    log "  e.g.  export PATH=\"$BIN_DIR:\$PATH\""
  fi
  exit 0
}

is_installed() {
  [[ -f "$STAMP" && "$(cat "$STAMP")" == "$KEY" ]] || return 1
  local b
  for b in "${BINARIES[@]}"; do [[ -x "$BIN_DIR/$b" ]] || return 1; done
  [[ -f "$BIN_DIR/kwok-stages.yaml" ]]
}

# Fast path: everything already there.
if is_installed; then finish; fi

mkdir -p "$(dirname "$BIN_DIR")"

# Serialize concurrent installs (e.g. several test packages calling
# --print-dir at once): the second one waits, then finds the cache ready.
if command -v flock >/dev/null; then
  exec 9>"$BIN_DIR.lock"
  if ! flock -n 9; then
    log "another install-testbin.sh is building $KEY; waiting for it..."
    flock 9
  fi
  if is_installed; then finish; fi
fi

# The go commands below must see ONLY the tools module: no workspace from the
# repo, no vendoring, and they must never rewrite go.mod (that would change
# the cache key under our feet).
export GOWORK=off GOFLAGS="-mod=readonly" CGO_ENABLED=0

# Fail early with one clear message if modules can't be fetched (offline, or
# GOPROXY blocked). With a warm module cache this succeeds without network.
log "install-testbin: downloading Go modules for hack/testbin (GOPROXY=$(go env GOPROXY))..."
dl_log=$(mktemp)
if ! (cd "$TOOLS_DIR" && go mod download) >"$dl_log" 2>&1; then
  reason=$(grep -m1 -iE 'error|dial|proxy|timeout|forbidden|not found' "$dl_log" || tail -n1 "$dl_log")
  rm -f "$dl_log"
  die "cannot download the Go modules pinned in hack/testbin/go.mod; check network access to the Go module proxy (GOPROXY=$(go env GOPROXY)). go said: $reason"
fi
rm -f "$dl_log"

# Build into a temporary directory next to the final one and rename it into
# place at the end: an interrupted or failed build never leaves a half cache.
TMP_DIR=$(mktemp -d "$BIN_DIR.tmp.XXXXXX")

# kube-* binaries report their version from these variables (normally set by
# Kubernetes' own build scripts). Without them `kubectl version` shows
# v0.0.0-master and version-skew checks get confused. (The linker ignores -X
# for packages a binary doesn't contain, so one set of flags fits all six.)
k8s_minor=$(echo "$K8S_VERSION" | cut -d. -f2)
KUBE_LDFLAGS="-s"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  KUBE_LDFLAGS+=" -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$k8s_minor -X $pkg.gitTreeState=clean"
done

# build <binary> <version> <main package>: one `go build` per binary so the
# progress is readable. They share most packages, so after kube-apiserver the
# others mostly just link (a single multi-package `go build` was measured to
# be no faster on 2 cores). The build runs in the background so we can print
# a heartbeat. A SIGTERM sent to this script (e.g. by a test timeout) does not
# reach the background build, hence the explicit kill in the EXIT trap.
build_pid=""
trap '[[ -z "$build_pid" ]] || kill "$build_pid" 2>/dev/null; rm -rf "$TMP_DIR"' EXIT
trap 'exit 130' INT TERM
build() {
  local name=$1 version=$2 pkg=$3 start=$SECONDS next=$((SECONDS + 30))
  log "install-testbin: building $name $version (takes minutes cold)..."
  (cd "$TOOLS_DIR" && exec go build -trimpath -buildvcs=false -ldflags="$KUBE_LDFLAGS" -o "$TMP_DIR/$name" "$pkg") &
  build_pid=$!
  while kill -0 "$build_pid" 2>/dev/null; do
    if ((SECONDS >= next)); then
      log "install-testbin:   ...still building $name ($((SECONDS - start))s)"
      next=$((SECONDS + 30))
    fi
    sleep 1
  done
  wait "$build_pid" || die "building $name failed (see the go output above)"
  build_pid=""
  log "install-testbin:   $name done in $((SECONDS - start))s"
}

total_start=$SECONDS
build etcd                    "$ETCD_VERSION" go.etcd.io/etcd/server/v3
build kube-apiserver          "$K8S_VERSION"  k8s.io/kubernetes/cmd/kube-apiserver
build kube-controller-manager "$K8S_VERSION"  k8s.io/kubernetes/cmd/kube-controller-manager
build kube-scheduler          "$K8S_VERSION"  k8s.io/kubernetes/cmd/kube-scheduler
build kubectl                 "$K8S_VERSION"  k8s.io/kubernetes/cmd/kubectl
build kwok                    "$KWOK_VERSION" sigs.k8s.io/kwok/cmd/kwok
log "install-testbin: built all binaries in $((SECONDS - total_start))s"

# kwok needs "stages" (the rules that turn a pending pod into a Running one,
# etc.); the kwok binary has none built in (kwokctl normally writes them).
# Ship the upstream "fast" set - the files kustomize/stage/fast pulls in -
# straight from the pinned kwok module, so they always match the binary.
kwok_dir=$(cd "$TOOLS_DIR" && go list -m -f '{{.Dir}}' sigs.k8s.io/kwok)
for f in node/fast/node-initialize.yaml \
  node/heartbeat-with-lease/node-heartbeat-with-lease.yaml \
  pod/fast/pod-ready.yaml pod/fast/pod-complete.yaml pod/fast/pod-delete.yaml; do
  [[ -f "$kwok_dir/kustomize/stage/$f" ]] || die "kwok stage $f not found in $kwok_dir"
  printf -- '---\n'
  cat "$kwok_dir/kustomize/stage/$f"
done >"$TMP_DIR/kwok-stages.yaml"

echo "$KEY" >"$TMP_DIR/.installed"
chmod 0755 "$TMP_DIR"
# Swap in the new directory. A stale one (e.g. FOO_TESTBIN_DIR reused across
# version bumps) is moved aside first, since rename can't replace a non-empty dir.
if [[ -e "$BIN_DIR" ]]; then
  old=$(mktemp -d "$BIN_DIR.old.XXXXXX")
  mv "$BIN_DIR" "$old/" && rm -rf "$old"
fi
mv "$TMP_DIR" "$BIN_DIR"
trap - EXIT
finish
