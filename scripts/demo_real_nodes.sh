#!/usr/bin/env bash
# The sample-worker part of `make demo` on real nodes (issue 28): phalanx-localcluster
# --nodes-kind real (4 real kubelets v1.28.7 with containerd, kube-scheduler, kube-proxy and
# CoreDNS; 4 fake GPUs each), Phalanx installed as a user installs it (`helm install` of
# deploy/helm/phalanx: the operator Deployment and one agent per node, as containers from the
# images of `make images`), and examples/trainingjob.yaml as containers. The same story as on
# process nodes: a task's process SIGKILLed in its container, a node preempted (taint, then its
# pods evicted through the Eviction API), then the node that hosts the coordinator; the job
# finishes with no restart spent on the coordinator's move.
#   scripts/demo_real_nodes.sh BUILD_DIR WORK_DIR    (START: when the demo began)
# Exits 0 when the job Succeeded with the coordinator's move free; leaves the cluster to the
# caller's cleanup (its pid in WORK_DIR/real-cluster.pid).
set -euo pipefail

BUILD=$1
WORK=$2
SRC=$(cd "$(dirname "$0")/.." && pwd)
CLUSTER="$BUILD/tests/localcluster/phalanx-localcluster"
KUBECTL="$BUILD/kubernetes-v1.28.7/kubectl"   # 1.28 against 1.28: within the supported skew
HELM=$("$SRC/scripts/install-helm.sh" --print 2>/dev/null || command -v helm || true)
export KUBECONFIG="$WORK/real/kubeconfig"
START=${DEMO_START:-$(date +%s.%N)}
source "$SRC/scripts/demo_lib.sh"

[[ -x "$HELM" ]] || HELM=$("$SRC/scripts/install-helm.sh" | tail -n1)
say "starting the local cluster on real nodes (4 kubelets with containerd, 4 fake GPUs each; images from make images)"
mkdir -p "$WORK/real"
"$CLUSTER" --nodes-kind real --nodes 4 --gpus-per-node 4 --node-labels nvidia.com/gpu.present=true \
  --kubeconfig-out "$KUBECONFIG" --work-dir "$WORK/real/cluster" \
  >"$WORK/real/cluster.out" 2>"$WORK/real/cluster.log" &
echo $! >"$WORK/real-cluster.pid"
if ! wait_for 180 grep -q '^ready ' "$WORK/real/cluster.out"; then
  echo "demo: the real-node cluster did not start; its log ($WORK/real/cluster.log) ends:" >&2
  tail -n 20 "$WORK/real/cluster.log" >&2
  exit 1
fi
nodes=$(sed -n 's/^phalanx-localcluster: serving [^ ]* with \(.*containerd [0-9.]*\),.*/\1/p' "$WORK/real/cluster.log")
say "cluster ready ($(sed 's/.*(\(.*\))$/\1/' "$WORK/real/cluster.out")): nodes: ${nodes}"
say "control plane: $(sed -n 's/^  control plane: //p' "$WORK/real/cluster.log")"

$KUBECTL apply --server-side -f "$SRC/crds/" >/dev/null
HELM_AT=$(date +%s.%N)
"$HELM" install phalanx "$SRC/deploy/helm/phalanx" --namespace phalanx-system --create-namespace \
  --set agent.fakeGpus=4 --wait --timeout 180s >"$WORK/real/helm.log" 2>&1
agents_ready() {
  [[ "$($KUBECTL -n phalanx-system get ds -o jsonpath='{.items[0].status.numberReady}')" == 4 ]]
}
wait_for 60 agents_ready  # helm's --wait takes a DaemonSet as ready before its last pod is
say "helm install: operator (leader elected) and 4 agents, one per node, running as containers ($(calc %.1f "$(date +%s.%N) - $HELM_AT") s)"

# 450 steps of 60 ms, as on process nodes: still training at the third fault.
sed "s#--step_time=100ms#--step_time=60ms#; s#--steps=300#--steps=450#" \
  "$SRC/examples/trainingjob.yaml" >"$WORK/real/trainingjob.yaml"
$KUBECTL get tj -w >"$WORK/real/watch.log" 2>&1 &
WATCH=$!
# Every task pod's log, followed from its start into logs/<namespace>_<pod>.log (the kubelet
# drops a deleted pod's log; the timeline picture below reads them all).
mkdir -p "$WORK/real/logs"
follow_task_logs() {
  local pod
  trap 'kill $(jobs -p) 2>/dev/null; exit 0' TERM
  while sleep 1; do
    for pod in $($KUBECTL get pods -l phalanx.dev/role=task --field-selector=status.phase=Running \
        -o jsonpath='{range .items[*]}{.metadata.name}{" "}{end}' 2>/dev/null); do
      [[ -e "$WORK/real/logs/default_$pod.log" ]] && continue
      $KUBECTL logs -f "$pod" >"$WORK/real/logs/default_$pod.log" 2>/dev/null &
    done
  done
}
follow_task_logs &
FOLLOW=$!
APPLY_AT=$(date +%s.%N)
say "$($KUBECTL apply -f "$WORK/real/trainingjob.yaml")"
wait_for 120 phase_is Running
say "all 4 tasks running as containers ($(calc %.1f "$(date +%s.%N) - $APPLY_AT") s after apply)"
sleep 4

victim=sample-task-1-0
say "killing task 1 (SIGKILL to its container's process, through containerd)"
KILL_AT=$(date +%s.%N)
"$CLUSTER" admin kill-pod "default/$victim" >/dev/null
replacement_running() {
  [[ "$($KUBECTL get pod sample-task-1-1 -o jsonpath='{.status.phase}' 2>/dev/null)" == Running ]]
}
wait_for 60 replacement_running
REPLACED_AT=$(date +%s.%N)
say "replacement sample-task-1-1 Running $(calc %d "($REPLACED_AT - $KILL_AT) * 1000") ms after the kill; other tasks untouched"
wait_for 60 phase_is Running
sleep 4

node=$($KUBECTL get pod sample-task-3-0 -o jsonpath='{.spec.nodeName}')
say "preempting node $node (the termination taint now; its pods evicted after 5 s)"
PREEMPT_AT=$(date +%s.%N)
"$CLUSTER" admin preempt-node "$node" --grace-seconds 5 >/dev/null
wait_for 90 preemptions_at_least 1
say "preempted tasks moved: $(job_field .status.preemptions) preemption(s)"
wait_for 90 phase_is Running

coordinator_node=$($KUBECTL get pod sample-coordinator -o jsonpath='{.spec.nodeName}')
coordinator_uid=$($KUBECTL get pod sample-coordinator -o jsonpath='{.metadata.uid}')
restarts_before=$(job_field .status.restarts)
say "preempting node $coordinator_node, which hosts the coordinator (evicted after 10 s)"
MOVE_AT=$(date +%s.%N)
"$CLUSTER" admin preempt-node "$coordinator_node" --grace-seconds 10 >/dev/null
wait_for 90 coordinator_replaced "$coordinator_uid"
MOVE_MS=$(calc %d "($(date +%s.%N) - $MOVE_AT) * 1000")
say "coordinator moved $coordinator_node -> $($KUBECTL get pod sample-coordinator -o jsonpath='{.spec.nodeName}'): successor running $MOVE_MS ms after the notice; restarts still $(job_field .status.restarts)"

wait_for 150 bash -c "p=\$($KUBECTL get tj sample -o jsonpath='{.status.phase}'); [[ \$p == Succeeded || \$p == Failed ]]"
say "job $(job_field .status.phase)"
kill $WATCH 2>/dev/null || true
kill $FOLLOW 2>/dev/null || true
echo
echo "=== kubectl get tj -w (real nodes) ==="
cat "$WORK/real/watch.log"
echo
echo "=== Timeline (real nodes: ${nodes}) ==="
echo "  task failure: kill -> replacement Running in $(calc %d "($REPLACED_AT - $KILL_AT) * 1000") ms"
echo "  restarts: $(job_field .status.restarts), preemptions: $(job_field .status.preemptions)," \
  "coordinator moves $(job_field .status.coordinator.moves), coordinator restarts $(job_field .status.coordinator.restarts)"
printf '  goodput: %.1f s productive, %.1f s lost\n' "$(job_field .status.productiveSeconds)" \
  "$(job_field .status.lostSeconds)"
# The lost seconds the phases do not show (docs/user-guide.md, Goodput accounting).
goodput_part() { local v; v=$(job_field ".status.goodput.$1"); echo "${v:-0}"; }
printf '  lost, of which: %.1f s failure to detection, %.1f s regroup, %.1f s coordinator down, %.1f s rolled back; %.1f s before the first step\n' \
  "$(goodput_part detectionSeconds)" "$(goodput_part regroupSeconds)" \
  "$(goodput_part coordinatorOutageSeconds)" "$(goodput_part rolledBackSeconds)" \
  "$(goodput_part beforeFirstStepSeconds)"
timeline_picture "$WORK/real/logs" "$WORK/real/timeline.png" "$node" "$coordinator_node"
echo "  logs: $WORK/real (cluster.log, logs/<pod>.log; nodes' kubelet/containerd logs in cluster/nodes/)"
[[ "$(job_field .status.phase)" == Succeeded && "$(job_field .status.restarts)" == "$restarts_before" &&
   "$(job_field .status.coordinator.restarts)" == 0 ]]
