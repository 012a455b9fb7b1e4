#!/usr/bin/env bash
# Stop the local control plane started by hack/local-up.sh.
#
#   hack/local-down.sh           stop every component, keep the state
#                                (etcd data, certs) for the next local-up.sh
#   hack/local-down.sh --clean   stop, then delete the state directory
#
# Only processes recorded in the pid files are touched (never "anything
# called etcd"), so a plane from another FOO_LOCAL_DIR or another project
# keeps running.
#
# Environment: FOO_LOCAL_DIR (as for local-up.sh), FOO_STOP_TIMEOUT=20
# (seconds to wait after SIGTERM before SIGKILL).
set -euo pipefail

STATE_DIR="${FOO_LOCAL_DIR:-${TMPDIR:-/tmp}/foo-controller-local}"
PIDS="$STATE_DIR/pids"
STOP_TIMEOUT="${FOO_STOP_TIMEOUT:-20}"

log() { printf 'local-down: %s\n' "$*" >&2; }

clean=false
case "${1:-}" in
  --clean) clean=true ;;
  "") ;;
  *) printf 'usage: %s [--clean]\n' "$0" >&2; exit 2 ;;
esac

# Same check as local-up.sh: the pid must still belong to the binary we
# started, not to an unrelated process that got the pid later.
pid_of() { # pid_of <component>: prints the pid if that component is running
  local f="$PIDS/$1.pid" pid
  [[ -f "$f" ]] || return 1
  pid=$(cat "$f")
  [[ "$(ps -o comm= -p "$pid" 2>/dev/null)" == "${1:0:15}" ]] || return 1
  echo "$pid"
}

# stop <component>...: SIGTERM all of them (they shut down gracefully), wait,
# then SIGKILL whatever is left after $STOP_TIMEOUT seconds.
stop() {
  local c pid pids=() names=()
  for c in "$@"; do
    if pid=$(pid_of "$c"); then
      log "stopping $c (pid $pid)"
      kill -TERM "$pid" 2>/dev/null || true
      pids+=("$pid"); names+=("$c")
    fi
    rm -f "$PIDS/$c.pid"
  done
  ((${#pids[@]} > 0)) || return 0
  local deadline=$((SECONDS + STOP_TIMEOUT)) i
  for i in "${!pids[@]}"; do
    while kill -0 "${pids[$i]}" 2>/dev/null; do
      if ((SECONDS >= deadline)); then
        log "${names[$i]} did not exit within ${STOP_TIMEOUT}s; sending SIGKILL"
        kill -KILL "${pids[$i]}" 2>/dev/null || true
        while kill -0 "${pids[$i]}" 2>/dev/null; do sleep 0.1; done
        break
      fi
      sleep 0.2
    done
  done
}

if [[ -d "$PIDS" ]]; then
  # Reverse start order: clients first, then the apiserver, etcd last, so
  # each component can still reach what it depends on while shutting down.
  stop kwok kube-scheduler kube-controller-manager
  stop kube-apiserver
  stop etcd
else
  log "nothing to stop ($PIDS does not exist)"
fi

if $clean && [[ -d "$STATE_DIR" ]]; then
  # Refuse to rm -rf a directory that local-up.sh did not create (the path
  # comes from the environment, so be careful).
  if [[ -f "$STATE_DIR/.foo-controller-local" ]]; then
    rm -rf "$STATE_DIR"
    log "removed $STATE_DIR"
  else
    log "not removing $STATE_DIR: it was not created by local-up.sh"
    exit 1
  fi
fi
log "done"
