#!/usr/bin/env bash
# The Phalanx demo on the local cluster. Where this machine can run real nodes (root, containerd,
# runc, CNI plugins; see docs/deploy.md "Try a real install on one machine") and the images are
# built, the sample job's story runs first on 4 real kubelets v1.28.7 with Phalanx installed by
# helm (scripts/demo_real_nodes.sh); PHALANX_DEMO_NODES=process skips that.
# On process nodes: phalanx-localcluster (4 nodes, 4 GPUs each) on a real
# control plane (etcd + kube-apiserver + kube-controller-manager) where the envtest assets are
# found (KUBEBUILDER_ASSETS, or ../shared/envtest unpacked by the build), else on its built-in API
# server,
# phalanx-operator, and a 4-task TrainingJob of sample workers applied with kubectl. One task is
# killed, then one node is preempted, then the node that hosts the coordinator (the operator
# moves the coordinator off it before the node goes); the job keeps going and finishes with no
# restart spent on the coordinator's move. Prints `kubectl get tj -w`,
# the job's Events and a timeline with goodput. Then a real PyTorch job (scripts/demo_torch.sh)
# through a kill, a hang, a coordinator kill and a node preemption, recovering in place, whose
# final parameters are compared with the undisturbed run's. Ends on its own (about 3 minutes).
#   scripts/demo.sh BUILD_DIR [--keep]   --keep: leave the cluster running and print KUBECONFIG
set -euo pipefail

BUILD=$(cd "${1:?usage: demo.sh BUILD_DIR [--keep]}" && pwd)
KEEP=0
[[ "${2:-}" == "--keep" || "${PHALANX_DEMO_KEEP:-0}" == "1" ]] && KEEP=1
SRC=$(cd "$(dirname "$0")/.." && pwd)
KUBECTL=${KUBECTL:-kubectl}
WORK=$(mktemp -d /tmp/phalanx-demo-XXXXXX)
# Pods run the sample worker and the coordinator by name, as they would from an image.
export PATH="$BUILD/examples/sample_worker:$BUILD/runtime/coordination:$PATH"
export KUBECONFIG="$WORK/kubeconfig"
START=$(date +%s.%N)
PIDS=()

source "$SRC/scripts/demo_lib.sh"
cleanup() {
  if [[ $KEEP == 1 ]]; then
    echo
    echo "The local cluster is still running (pid ${PIDS[0]:-?}); stop it with: kill ${PIDS[*]:-}"
    echo "  export KUBECONFIG=$KUBECONFIG"
    return
  fi
  for pid in "${PIDS[@]:-}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap cleanup EXIT

# Real nodes when this machine can run them (root, containerd, runc, the CNI plugins,
# ../shared/kubernetes-v1.28.7) and `make images` built the images: the sample job then runs as
# containers on real kubelets (scripts/demo_real_nodes.sh), and process nodes below run the
# PyTorch part (its image, ~1 GB of Debian python3-torch: `make torch-image`; tests/nodes
# node_torch runs it on real nodes).
# PHALANX_DEMO_NODES=process skips real nodes.
REAL_NODES=0
real_ok=0
CLUSTER_BIN="$BUILD/tests/localcluster/phalanx-localcluster"
if [[ ${PHALANX_DEMO_NODES:-auto} != process ]]; then
  if ! "$CLUSTER_BIN" check --nodes-kind real >"$WORK/real-check.txt" 2>&1; then
    say "real nodes: not here ($(tail -n1 "$WORK/real-check.txt")); the sample job runs on process nodes"
  elif ! compgen -G "$BUILD/images/phalanx-operator-*.oci.tar" >/dev/null; then
    say "real nodes: no images in $BUILD/images (make images); the sample job runs on process nodes"
  else
    REAL_NODES=1
  fi
fi
if [[ $REAL_NODES == 1 ]]; then
  real_ok=1
  DEMO_START=$START "$SRC/scripts/demo_real_nodes.sh" "$BUILD" "$WORK" || real_ok=0
  if [[ -f "$WORK/real-cluster.pid" ]]; then  # stopped now: the PyTorch part needs the cores
    real_pid=$(cat "$WORK/real-cluster.pid")
    kill "$real_pid" 2>/dev/null || true
    while kill -0 "$real_pid" 2>/dev/null; do sleep 0.2; done
    say "real-node cluster stopped (everything it changed on the machine undone)"
  fi
  echo
fi

say "starting the local cluster (4 process nodes x 4 GPUs; each task asks for 2)"
"$BUILD/tests/localcluster/phalanx-localcluster" --kubeconfig-out "$KUBECONFIG" \
  --work-dir "$WORK/cluster" --nodes 4 --gpus-per-node 4 >"$WORK/cluster.out" 2>"$WORK/cluster.log" &
PIDS+=($!)
if ! wait_for 120 grep -q '^ready ' "$WORK/cluster.out"; then
  echo "demo: the local cluster did not start; its log ($WORK/cluster.log) ends:" >&2
  tail -n 20 "$WORK/cluster.log" >&2
  exit 1
fi
say "cluster ready: $(cut -d' ' -f2 "$WORK/cluster.out")"
say "control plane: $(sed -n 's/^  control plane: //p' "$WORK/cluster.log")"

$KUBECTL apply -f "$SRC/crds/trainingjobs.phalanx.dev.yaml" >/dev/null
wait_for 60 crd_established
"$BUILD/operator/phalanx-operator" --kubeconfig "$KUBECONFIG" --coordinator_address pod-ip \
  --coordinator_port_base $(( 20000 + (RANDOM % 4000) * 2 )) --metrics_listen 127.0.0.1:0 \
  --lease_namespace default >"$WORK/operator.out" 2>"$WORK/operator.log" &
PIDS+=($!)
wait_for 30 grep -q '^ready ' "$WORK/operator.out"
say "operator ready ($(cat "$WORK/operator.out"))"

# One node agent per virtual node, each with a fake inventory of 4 GPUs.
for n in 0 1 2 3; do
  "$BUILD/node_agent/phalanx-agent" --kubeconfig "$KUBECONFIG" --node_name "node-$n" \
    --fake_gpus 4 --clique_socket "$WORK/agent-$n.sock" --metrics_listen 127.0.0.1:0 \
    >"$WORK/agent-$n.out" 2>"$WORK/agent-$n.log" &
  PIDS+=($!)
done
for n in 0 1 2 3; do wait_for 30 grep -q '^ready ' "$WORK/agent-$n.out"; done
say "node agents ready on node-0..3 (4 fake GPUs each; GPU health, preemption notices)"

if [[ $REAL_NODES == 1 ]]; then
  # The sample job ran on real nodes above; this cluster is for the PyTorch part only.
  sample_ok=$real_ok
else
  # 450 steps of 60 ms: long enough to still be training at the third fault.
  sed "s#/tmp/phalanx-checkpoints/sample#$WORK/checkpoints#; s#--step_time=100ms#--step_time=60ms#;
       s#--steps=300#--steps=450#" \
    "$SRC/examples/trainingjob.yaml" >"$WORK/trainingjob.yaml"
  $KUBECTL get tj -w >"$WORK/watch.log" 2>&1 &
  PIDS+=($!)
  say "$($KUBECTL apply -f "$WORK/trainingjob.yaml")"
  wait_for 60 phase_is Running
  say "all 4 tasks running"
  sleep 4

  victim=sample-task-1-0
  say "killing task 1 (pod $victim) with SIGKILL"
  KILL_AT=$(date +%s.%N)
  "$BUILD/tests/localcluster/phalanx-localcluster" admin kill-pod "default/$victim" >/dev/null
  wait_for 30 $KUBECTL get pod sample-task-1-1
  REPLACED_AT=$(date +%s.%N)
  say "replacement pod sample-task-1-1 created ($(calc %d "($REPLACED_AT - $KILL_AT) * 1000") ms after the kill); other tasks untouched"
  wait_for 60 phase_is Running
  say "job Running again"
  sleep 4

  node=$($KUBECTL get pod sample-task-3-0 -o jsonpath='{.spec.nodeName}')
  say "preempting node $node (tasks on it get DisruptionTarget; evicted after 5 s)"
  PREEMPT_AT=$(date +%s.%N)
  "$BUILD/tests/localcluster/phalanx-localcluster" admin preempt-node "$node" --grace-seconds 5 >/dev/null
  wait_for 60 preemptions_at_least 1
  say "preempted tasks moved to the other node: $(job_field .status.preemptions) preemption(s)"
  wait_for 60 phase_is Running

  # The coordinator's own node: the operator moves the coordinator off it at once (before the
  # node's pods are evicted), the tasks reconnect to its successor; a move is not a restart.
  coordinator_node=$($KUBECTL get pod sample-coordinator -o jsonpath='{.spec.nodeName}')
  coordinator_uid=$($KUBECTL get pod sample-coordinator -o jsonpath='{.metadata.uid}')
  restarts_before=$(job_field .status.restarts)
  on_it=$($KUBECTL get pods -l phalanx.dev/role=task --field-selector "spec.nodeName=$coordinator_node,status.phase=Running" \
    -o jsonpath='{range .items[*]}{.metadata.name}{" "}{end}' 2>/dev/null)
  say "preempting node $coordinator_node, which hosts the coordinator (and tasks: ${on_it:-none}; evicted after 10 s)"
  MOVE_AT=$(date +%s.%N)
  "$BUILD/tests/localcluster/phalanx-localcluster" admin preempt-node "$coordinator_node" --grace-seconds 10 >/dev/null
  wait_for 60 coordinator_replaced "$coordinator_uid"
  MOVED_AT=$(date +%s.%N)
  successor_node=$($KUBECTL get pod sample-coordinator -o jsonpath='{.spec.nodeName}')
  MOVE_MS=$(calc %d "($MOVED_AT - $MOVE_AT) * 1000")
  say "coordinator moved $coordinator_node -> $successor_node: successor running $MOVE_MS ms after the notice (the node's pods go at 10 s); restarts still $(job_field .status.restarts)"

  wait_for 100 bash -c "p=\$($KUBECTL get tj sample -o jsonpath='{.status.phase}'); [[ \$p == Succeeded || \$p == Failed ]]"
  say "job $(job_field .status.phase)"

  echo
  echo "=== kubectl get tj -w ==="
  cat "$WORK/watch.log"
  echo
  echo "=== Events of the job ==="
  $KUBECTL get events --field-selector involvedObject.name=sample \
    -o custom-columns=TYPE:.type,REASON:.reason,MESSAGE:.message 2>/dev/null || true
  echo
  echo "=== Timeline ==="
  productive=$(job_field .status.productiveSeconds)
  lost=$(job_field .status.lostSeconds)
  echo "  task failure: kill → replacement pod created in $(calc %d "($REPLACED_AT - $KILL_AT) * 1000") ms"
  echo "  restarts: $(job_field .status.restarts), preemptions: $(job_field .status.preemptions)"
  echo "  coordinator: node $coordinator_node preempted -> moved to $successor_node in $MOVE_MS ms;" \
    "moves $(job_field .status.coordinator.moves), coordinator restarts $(job_field .status.coordinator.restarts)," \
    "job restarts $restarts_before before and $(job_field .status.restarts) after"
  printf '  goodput: %.1f s productive, %.1f s lost (%.0f%%)\n' "${productive:-0}" "${lost:-0}" \
    "$(calc %.1f "100 * ${productive:-0} / (${productive:-0} + ${lost:-0} + 0.0001)")"
  # The lost seconds the phases do not show (accounting rule: docs/user-guide.md, Goodput).
  printf '  lost, of which: %.1f s failure to detection, %.1f s regroup, %.1f s coordinator down, %.1f s rolled back\n' \
    "$(g=$(job_field .status.goodput.detectionSeconds); echo "${g:-0}")" \
    "$(g=$(job_field .status.goodput.regroupSeconds); echo "${g:-0}")" \
    "$(g=$(job_field .status.goodput.coordinatorOutageSeconds); echo "${g:-0}")" \
    "$(g=$(job_field .status.goodput.rolledBackSeconds); echo "${g:-0}")"
  printf '  before the first step (neither productive nor lost): %.1f s\n' \
    "$(g=$(job_field .status.goodput.beforeFirstStepSeconds); echo "${g:-0}")"
  logs="$WORK/cluster/logs"
  sync_steps=$(grep -h "kind=sync_checkpoint" "$logs"/*.log 2>/dev/null |
    sed 's/.*step=\([0-9]*\).*/\1/' | sort -u | tr '\n' ' ')
  echo "  preemption notice: every task checkpointed at step ${sync_steps:-(none)}"
  # One "recovered" line per task per recovery; the epoch names the recovery, `lost` its cost.
  lost_steps=$(grep -h "kind=recovered" "$logs"/*.log 2>/dev/null |
    sed 's/.*lost=\([0-9]*\).*epoch=\([0-9a-f]*\).*/\2 \1/' | sort -u |
    awk '{ s += $2 } END { print s + 0 }')
  echo "  steps lost to rollbacks (all recoveries): $lost_steps"
  states=$(grep -h "kind=done" "$logs"/*.log 2>/dev/null | sed 's/.*state=//' | sort -u | wc -l)
  echo "  final model state identical on every task: $([[ $states == 1 ]] && echo yes || echo "NO ($states states)")"
  healthy=$($KUBECTL get nodes -o jsonpath='{range .items[*]}{.status.conditions[?(@.type=="PhalanxGpuHealthy")].status}{" "}{end}' 2>/dev/null)
  echo "  node agents: PhalanxGpuHealthy per node: ${healthy:-(not reported)}"
  # The same story as a picture: each task's step over time, its pods, the faults.
  timeline_picture "$logs" "$WORK/timeline.png" "$node" "$coordinator_node"
  echo "  logs: $WORK (cluster.log, operator.log, agent-<n>.log, cluster/logs/<pod>.log)"
  [[ "$(job_field .status.phase)" == Succeeded ]] &&
    # No restart was spent on the coordinator's move.
    [[ "$(job_field .status.restarts)" == "$restarts_before" && "$(job_field .status.coordinator.restarts)" == 0 ]] &&
    sample_ok=1
fi

echo
torch_ok=1
DEMO_START=$START "$SRC/scripts/demo_torch.sh" "$BUILD" "$WORK" || torch_ok=0
say "demo finished"
[[ $sample_ok == 1 && $torch_ok == 1 ]]
