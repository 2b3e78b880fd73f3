#!/usr/bin/env bash
# PidOne.EveryProgramStopsOnSigtermAsAContainersPidOne: each of our programs that can be a
# container's first process runs as PID 1 of a new PID namespace (unshare), as a container's does,
# and must end promptly on SIGTERM, the kubelet's stop. The kernel drops any signal that PID 1 has
# no handler for, so a program that relies on SIGTERM's default action would make every pod
# deletion wait out its whole grace period (the sample worker did, issue 28).
# Exit 77 (skipped) where a PID namespace cannot be made (unshare needs CAP_SYS_ADMIN).
set -u
build=$1
work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null; done
  rm -rf "$work"
}
trap cleanup EXIT
if ! unshare --pid --fork --kill-child true 2>/dev/null; then
  echo "SKIP: cannot create a PID namespace here (unshare --pid: needs CAP_SYS_ADMIN)"
  exit 77
fi
failed=0

# wait_for FILE PATTERN: until FILE has a line matching PATTERN (20 s).
wait_for() {
  for _ in $(seq 1 200); do grep -q "$2" "$1" 2>/dev/null && return 0; sleep 0.1; done
  return 1
}

# as_pid_one NAME EXPECTED_EXIT READY_PATTERN COMMAND...: starts COMMAND as PID 1, waits for its
# ready line on stdout or stderr, SIGTERMs it and expects EXPECTED_EXIT within 10 s.
as_pid_one() {
  local name=$1 expected=$2 ready=$3
  shift 3
  unshare --pid --fork --kill-child "$@" >"$work/$name.log" 2>&1 &
  local outer=$!
  pids+=("$outer")
  if ! wait_for "$work/$name.log" "$ready"; then
    echo "FAIL: $name did not print '$ready':"; cat "$work/$name.log"; failed=1; return
  fi
  local inner; inner=$(pgrep -P "$outer" | head -1)
  kill -TERM "$inner"
  local code=""
  for _ in $(seq 1 100); do
    if ! kill -0 "$outer" 2>/dev/null; then wait "$outer"; code=$?; break; fi
    sleep 0.1
  done
  if [ -z "$code" ]; then
    echo "FAIL: $name as PID 1 was still running 10 s after SIGTERM"
    kill -KILL "$inner" 2>/dev/null
    wait "$outer" 2>/dev/null
    failed=1
  elif [ "$code" != "$expected" ]; then
    echo "FAIL: $name as PID 1 ended with $code after SIGTERM, not $expected:"; tail -5 "$work/$name.log"
    failed=1
  else
    echo "PASS: $name as PID 1 ended with $code after SIGTERM"
  fi
}

printf 'pid-one-token\n' >"$work/token"
as_pid_one coordinator 0 '^ready ' "$build/runtime/coordination/phalanx-coordinator" \
  --listen=127.0.0.1:0 --metrics_listen= --job=pid-one --num_tasks=1 --token_file="$work/token"

as_pid_one agent 0 '^ready ' "$build/node_agent/phalanx-agent" --kube=false --fake_gpus=1 \
  --notice_sources= --node_name=pid-one --metrics_listen=127.0.0.1:0 \
  --clique_socket="$work/cliques.sock"

# The sample worker needs its job's coordinator (an ordinary process here).
"$build/runtime/coordination/phalanx-coordinator" --listen=127.0.0.1:0 --metrics_listen= \
  --job=pid-one --num_tasks=1 --token_file="$work/token" >"$work/coord.out" 2>"$work/coord.err" &
pids+=("$!")
wait_for "$work/coord.out" '^ready ' || { echo "FAIL: the coordinator did not start"; exit 1; }
address=$(grep -o 'grpc=[^ ]*' "$work/coord.out" | sed 's/grpc=//')
PHALANX_COORDINATOR=$address PHALANX_JOB=pid-one PHALANX_TASK_ID=0 PHALANX_NUM_TASKS=1 \
  PHALANX_INCARNATION=0 PHALANX_TOKEN=pid-one-token \
  as_pid_one sample-worker 143 'kind=start ' "$build/examples/sample_worker/phalanx-sample-worker" \
  --steps=100000 --step_time=50ms --checkpoint_dir="$work/ckpt" --agent_devices=none

exit $failed
