#!/usr/bin/env bash
# The PyTorch part of `make demo` (issue 14): examples/trainingjob-torch.yaml (4 tasks of an MLP
# under DDP, gloo on CPU, phalanx.torch_recovery.Manager) on the local cluster scripts/demo.sh
# started, through a SIGKILLed task, a SIGSTOPped (hung) task, a SIGKILLed coordinator pod and a
# node preemption. Survivors recover in place; at the end the final parameters of every task are
# compared with the undisturbed run's (torch_train.py --reference, computed here in one process).
#   scripts/demo_torch.sh BUILD_DIR WORK_DIR      (KUBECONFIG set; the cluster running)
set -euo pipefail

BUILD=$1
WORK=$2
SRC=$(cd "$(dirname "$0")/.." && pwd)
KUBECTL=${KUBECTL:-kubectl}
PYTHON=${PHALANX_TORCH_PYTHON:-/usr/bin/python3}
CLUSTER="$BUILD/tests/localcluster/phalanx-localcluster"
LOGS="$WORK/cluster/logs"
JOB=torch
START=${DEMO_START:-$(date +%s.%N)}
STEPS=300

source "$SRC/scripts/demo_lib.sh"
phase() { $KUBECTL get tj $JOB -o 'jsonpath={.status.phase}' 2>/dev/null; }
# Task $1's newest pod: <job>-task-<i>-<incarnation>, or a spare pod (<job>-spare-<k>) that took
# the task over and was relabelled as its pod (spec.spares).
pod_of() {
  $KUBECTL get pods -l "phalanx.dev/job=$JOB,phalanx.dev/task=$1" \
    -o jsonpath='{range .items[*]}{.metadata.labels.phalanx\.dev/incarnation}{" "}{.metadata.name}{"\n"}{end}' 2>/dev/null |
    sort -n | tail -1 | cut -d' ' -f2
}
# "a warm spare pod" when pod $1 is a spare that took a task over, else "a new pod".
kind_of() { [[ $1 == *-spare-* ]] && echo "warm spare pod $1" || echo "new pod $1"; }
log_of() { cat "$LOGS/default_$1.log" 2>/dev/null || true; }
# The lowest step the current pods of all tasks reached.
min_step() {
  local min=999999 t s
  for t in 0 1 2 3; do
    s=$(log_of "$(pod_of $t)" | sed -n 's/.* kind=step step=\([0-9]*\).*/\1/p' | tail -1)
    (( ${s:-0} < min )) && min=${s:-0}
  done
  echo $min
}
step_at_least() { (( $(min_step) >= $1 )); }
formed() { log_of "$1" | grep -q " kind=formed "; }
field() { sed -n "s/.* $1=\([^ ]*\).*/\1/p"; }
formed_line() { log_of "$1" | grep " kind=formed " | tail -1; }
# The survivors' "recovered" events for the epoch the new pod $1 formed in (none when every task
# was new: all restarted from the checkpoint).
recovered_lines() {
  local epoch; epoch=$(formed_line "$1" | field epoch)
  cat "$LOGS"/default_$JOB-*.log | grep " kind=recovered .*epoch=$epoch " || true
}
report_recovery() {
  local formed line
  formed=$(formed_line "$1")
  local i
  for i in $(seq 50); do [[ -n "$(recovered_lines "$1")" ]] && break; sleep 0.2; done
  line=$(recovered_lines "$1" | head -1)
  if [[ -n "$line" ]]; then
    say "  group re-formed with $(kind_of "$1") (incarnation $(field inc <<<"$formed")): $(recovered_lines "$1" | wc -l) survivor(s) kept their process and model; resumed at step $(field step <<<"$line") with task $(field source <<<"$line")'s state, $(field took_s <<<"$line") s after they saw the failure"
  else
    say "  group re-formed with $1: every task was new; resumed at step $(field step <<<"$formed") from the checkpoint"
  fi
}

if ! "$PYTHON" -c 'import torch' 2>/dev/null; then
  say "PyTorch part skipped: $PYTHON cannot import torch (make deps installs python3-torch)"
  exit 0
fi
say "PyTorch job: 4 tasks and 1 spare pod, an MLP under DistributedDataParallel (gloo), in-place recovery"
# The local cluster runs pods as processes on this machine: the example from the checkout, the
# package and library of this build, gloo on loopback.
sed "s#\"python3\"#\"$PYTHON\"#; s#/opt/phalanx/examples#$SRC/runtime/python/examples#g; s#/ckpt/torch#$WORK/torch-checkpoints#" \
  "$SRC/examples/trainingjob-torch.yaml" |
  sed "/PYTHONUNBUFFERED/a\\            - {name: GLOO_SOCKET_IFNAME, value: lo}\\n            - {name: PYTHONPATH, value: $SRC/runtime/python}\\n            - {name: PHALANX_LIBRARY, value: $BUILD/runtime/client/libphalanx_c.so}" \
  >"$WORK/trainingjob-torch.yaml"
say "$($KUBECTL apply -f "$WORK/trainingjob-torch.yaml")"
wait_for 120 step_at_least 10
say "training (step $(min_step) of $STEPS on every task)"

# A task's pod other than $2 that has formed the group: its replacement.
replaced() { local p; p=$(pod_of "$1"); [[ -n $p && $p != "$2" ]] && formed "$p"; }
spare_ready() { [[ "$($KUBECTL get tj $JOB -o jsonpath='{.status.spares.ready}' 2>/dev/null)" == 1 ]]; }
wait_for 120 spare_ready
say "a spare pod waits warm (torch imported, in phalanx.init()): status.spares.ready=1"
victim=$(pod_of 2)
say "killing task 2 (pod $victim) with SIGKILL"
"$CLUSTER" admin kill-pod "default/$victim" >/dev/null
wait_for 120 replaced 2 "$victim"
report_recovery "$(pod_of 2)"

wait_for 120 step_at_least 70
wait_for 120 spare_ready
victim=$(pod_of 3)
say "hanging task 3 (SIGSTOP to pod $victim): only the heartbeat timeout (3 s) can tell"
"$CLUSTER" admin stop-pod "default/$victim" >/dev/null
wait_for 120 replaced 3 "$victim"
report_recovery "$(pod_of 3)"

wait_for 120 step_at_least 130
before=$(min_step)
say "killing the coordinator (pod $JOB-coordinator) with SIGKILL at step $before"
"$CLUSTER" admin kill-pod "default/$JOB-coordinator" >/dev/null
wait_for 60 step_at_least $(( before + 20 ))
say "  training went on meanwhile (step $(min_step)); the tasks reconnect to the new coordinator"

wait_for 120 step_at_least 190
victim=$(pod_of 1)
node=$($KUBECTL get pod "$victim" -o jsonpath='{.spec.nodeName}')
hosted=$($KUBECTL get pods -l phalanx.dev/role=task --field-selector "spec.nodeName=$node,status.phase=Running" \
  -o jsonpath='{range .items[*]}{.metadata.name}{" "}{end}' 2>/dev/null | grep -o "$JOB-task-[0-9]*" | sort -u | tr '\n' ' ')
say "preempting node $node (running there: ${hosted:-?}; evicted after 5 s): checkpoint at an agreed step, leave, re-form"
"$CLUSTER" admin preempt-node "$node" --grace-seconds 5 >/dev/null
moved() { [[ "$(pod_of 1)" != "$victim" ]] && formed "$(pod_of 1)"; }
wait_for 120 moved
report_recovery "$(pod_of 1)"

wait_for 180 bash -c "p=\$($KUBECTL get tj $JOB -o jsonpath='{.status.phase}'); [[ \$p == Succeeded || \$p == Failed ]]"
say "PyTorch job $(phase)"

reference=$(PYTHONPATH="$SRC/runtime/python" "$PYTHON" "$SRC/runtime/python/examples/torch_train.py" \
  --steps=$STEPS --step_time=0.05 --reference=4 | tail -1 | field params_sha256)
same=yes
for t in 0 1 2 3; do
  # The newest incarnation of the task that trained to the end (a task pod or a spare's).
  got=$(cat "$LOGS"/default_$JOB-*.log | grep " task=$t .* kind=final " |
    awk '{for (i = 1; i <= NF; i++) if ($i ~ /^inc=/) print substr($i, 5), $0}' | sort -n | tail -1 |
    field params_sha256)
  [[ "$got" == "$reference" ]] || same="NO (task $t: ${got:-no final line})"
done
echo
echo "=== PyTorch job ==="
echo "  restarts: $($KUBECTL get tj $JOB -o jsonpath='{.status.restarts}') (taken over by spares: $($KUBECTL get tj $JOB -o jsonpath='{.status.spares.takeovers}')), preemptions: $($KUBECTL get tj $JOB -o jsonpath='{.status.preemptions}'), coordinator restarts: $($KUBECTL get tj $JOB -o jsonpath='{.status.coordinator.restarts}')"
echo "  recoveries (in place, per re-formed group): $(cat "$LOGS"/default_$JOB-*.log | grep ' kind=recovered ' | field epoch | sort -u | wc -l)"
echo "  final parameters (SHA-256) of the undisturbed run: ${reference:0:16}…"
echo "  final parameters identical to the undisturbed run: $same"
[[ "$(phase)" == Succeeded && "$same" == yes ]]
