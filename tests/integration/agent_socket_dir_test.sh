#!/usr/bin/env bash
# AgentInitContainer.PreparesTheSocketDirWithOnlyCapChown_AgainAndAgain: `phalanx-agent
# prepare-socket-dir` as the chart's init container runs it — root holding CAP_CHOWN and nothing
# else (setpriv drops the rest, as the chart's securityContext does) — on a folder the kubelet
# made (root, 0755), then again on the folder it handed over (every restart of the agent's pod),
# then on one the agent's user left 0700. On a real kubelet the second run once failed:
# chmod of a folder root no longer owned needs CAP_FOWNER, so every agent pod restart was
# Init:CrashLoopBackOff. Exit 77 (skipped) without root or setpriv.
set -u
build=$1
[ "$(id -u)" = 0 ] || { echo "SKIP: needs root (the init container runs as root)"; exit 77; }
command -v setpriv >/dev/null || { echo "SKIP: setpriv (util-linux) is not installed"; exit 77; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
dir="$work/phalanx"
mkdir -m 0755 "$dir"
init() { setpriv --bounding-set=-all,+chown "$build/node_agent/phalanx-agent" prepare-socket-dir "$dir" 65532:65532; }
check() {  # WHAT
  local got; got=$(stat -c '%u:%g %a' "$dir")
  [ "$got" = "65532:65532 750" ] || { echo "FAIL: $1: the folder is $got, want 65532:65532 750"; exit 1; }
  echo "PASS: $1"
}
init || { echo "FAIL: the first run"; exit 1; }
check "a folder the kubelet made is handed to 65532"
init || { echo "FAIL: the second run (the pod restarted) failed"; exit 1; }
check "run again on the handed-over folder"
chmod 0700 "$dir"
init || { echo "FAIL: the run on a 0700 folder owned by 65532 failed"; exit 1; }
check "a folder its user left 0700 is set back to 0750"
