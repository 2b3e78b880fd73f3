#!/usr/bin/env bash
# The local cluster the operator end-to-end cases and the kubectl cases share (CTest fixture
# e2e_shared_cluster; see operator_e2e_fixture.h and tests/localcluster/kubectl_test.cc):
#   shared_cluster.sh start BUILD_DIR DIR [FLAGS...]
#                                           starts phalanx-localcluster (default FLAGS: 2 nodes,
#                                           2 fake GPUs each: the kubectl cases' pod asks for
#                                           one) in the background, waits for it, writes
#                                           DIR/ready; when the cluster cannot run here (exit 3,
#                                           e.g. real nodes without root or containerd) writes
#                                           the reason to DIR/skip and exits 0, so the cases
#                                           that share it skip with that reason
#   shared_cluster.sh stop DIR              stops it (SIGTERM, then SIGKILL after 30 s)
# The cluster outlives the start script, so it is bounded twice over: `stop` ends it, and it ends
# itself after an hour (timeout) should the run be killed before `stop`. A new `start` first
# stops a previous one left in DIR.
set -u
what=${1:-} 
stop() {
  local dir=$1 pid
  pid=$(cat "$dir/pid" 2>/dev/null) || return 0
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid"
    for _ in $(seq 1 300); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null
  fi
  rm -f "$dir/pid" "$dir/ready" "$dir/skip"
}
case "$what" in
  start)
    build=$2 dir=$3
    shift 3
    [ $# -gt 0 ] || set -- --nodes 2 --gpus-per-node 2
    stop "$dir"
    rm -rf "$dir"
    mkdir -p "$dir"
    # setsid: its own process group, so that CTest ending this script does not end it.
    setsid timeout 3600 "$build/tests/localcluster/phalanx-localcluster" \
      --kubeconfig-out "$dir/kubeconfig" --work-dir "$dir/cluster" "$@" \
      >"$dir/out" 2>"$dir/cluster.log" </dev/null &
    echo $! >"$dir/pid"
    for _ in $(seq 1 1800); do  # 180 s: a real control plane on a loaded machine
      if grep -q '^ready ' "$dir/out" 2>/dev/null; then
        grep '^ready ' "$dir/out" >"$dir/ready"
        echo "shared local cluster: $(cat "$dir/ready") (pid $(cat "$dir/pid"))"
        exit 0
      fi
      if ! kill -0 "$(cat "$dir/pid")" 2>/dev/null; then
        wait "$(cat "$dir/pid")"
        if [ $? = 3 ]; then
          tail -1 "$dir/cluster.log" >"$dir/skip"
          echo "the shared local cluster cannot run here: $(cat "$dir/skip")"
          exit 0
        fi
        echo "the shared local cluster exited before it was ready:"; tail -20 "$dir/cluster.log"
        exit 1
      fi
      sleep 0.1
    done
    echo "the shared local cluster was not ready within 180 s:"; tail -20 "$dir/cluster.log"
    stop "$dir"
    exit 1
    ;;
  stop)
    stop "$2"
    rm -rf "$2"
    echo "shared local cluster stopped"
    ;;
  *)
    echo "usage: shared_cluster.sh start BUILD_DIR DIR | stop DIR" >&2
    exit 2
    ;;
esac
