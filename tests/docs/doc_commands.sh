#!/usr/bin/env bash
# Runs the kubectl and phalanx-localcluster commands that docs/quickstart.md, docs/user-guide.md
# and docs/operations.md show, against a fresh local cluster with the operator and one node agent
# per node, and checks that they do what the docs say. The docs mark each of these commands
# `# tested-by: tests/docs/doc_commands.sh`; tests/docs/check_docs.py checks that the command is
# still here. CTest: Docs.CommandsRun (label docs).
#   tests/docs/doc_commands.sh SOURCE_DIR BUILD_DIR
# Takes about a minute. Leaves its logs in a /tmp/phalanx-doccmds-* folder on failure.
set -euo pipefail

SRC=$(cd "${1:?usage: doc_commands.sh SOURCE_DIR BUILD_DIR}" && pwd)
BUILD=$(cd "${2:?usage: doc_commands.sh SOURCE_DIR BUILD_DIR}" && pwd)
WORK=$(mktemp -d /tmp/phalanx-doccmds-XXXXXX)
LC="$BUILD/tests/localcluster/phalanx-localcluster"
for bin in "$LC" "$BUILD/operator/phalanx-operator" "$BUILD/node_agent/phalanx-agent" \
           "$BUILD/examples/sample_worker/phalanx-sample-worker" \
           "$BUILD/runtime/coordination/phalanx-coordinator"; do
  [[ -x $bin ]] || { echo "doc_commands: $bin is not built; skipping"; exit 77; }
done
command -v kubectl >/dev/null || { echo "doc_commands: no kubectl; skipping"; exit 77; }
# Pods run the sample worker and the coordinator by name, as they would from an image.
export PATH="$BUILD/examples/sample_worker:$BUILD/runtime/coordination:$BUILD/tests/localcluster:$BUILD/node_agent:$PATH"
export KUBECONFIG="$WORK/kubeconfig"
PIDS=()
OK=0
cleanup() {
  for pid in "${PIDS[@]:-}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  if [[ $OK == 1 ]]; then rm -rf "$WORK"; else echo "doc_commands: logs in $WORK" >&2; fi
}
trap cleanup EXIT
step() { echo; echo "--- $*"; }
fail() { echo "doc_commands: FAILED: $*" >&2; exit 1; }
KUBECTL=kubectl
# wait_for SECONDS COMMAND..., phase_is PHASE (the sample job's), crd_established.
source "$SRC/scripts/demo_lib.sh"

step "cpp-client: a coordinator and two sample workers, no Kubernetes"
echo my-secret > "$WORK/token"
phalanx-coordinator --job j --num_tasks 2 --token_file "$WORK/token" --listen 127.0.0.1:0 \
  --metrics_listen= --exit_after_shutdown >"$WORK/coord.out" 2>"$WORK/coord.log" &
coord=$!
wait_for 30 grep -q '^ready ' "$WORK/coord.out"
addr=$(sed -n 's/^ready grpc=\([^ ]*\).*/\1/p' "$WORK/coord.out")
PHALANX_COORDINATOR=$addr PHALANX_JOB=j PHALANX_NUM_TASKS=2 PHALANX_TOKEN=my-secret PHALANX_TASK_ID=0 \
  phalanx-sample-worker --steps=20 --checkpoint_dir="$WORK/ckpt" >"$WORK/w0.out" 2>&1 &
w0=$!
PHALANX_COORDINATOR=$addr PHALANX_JOB=j PHALANX_NUM_TASKS=2 PHALANX_TOKEN=my-secret PHALANX_TASK_ID=1 \
  phalanx-sample-worker --steps=20 --checkpoint_dir="$WORK/ckpt" >"$WORK/w1.out" 2>&1 &
w1=$!
wait $w0 || fail "worker 0 failed"
wait $w1 || fail "worker 1 failed"
wait $coord || fail "coordinator did not exit 0 after the shutdown barrier"
grep -h 'kind=done' "$WORK/w0.out" "$WORK/w1.out"
[[ $(grep -h 'kind=done' "$WORK/w0.out" "$WORK/w1.out" | sed 's/.*state=//' | sort -u | wc -l) == 1 ]] ||
  fail "the two workers ended in different states"

step "local cluster, operator, agents"
phalanx-localcluster --kubeconfig-out "$KUBECONFIG" --work-dir "$WORK/cluster" --nodes 3 \
  --gpus-per-node 4 >"$WORK/cluster.out" 2>"$WORK/cluster.log" &
PIDS+=($!)
# A real control plane (where its assets are found) takes several seconds to start.
wait_for 120 grep -q '^ready ' "$WORK/cluster.out"
kubectl apply -f "$SRC/crds/trainingjobs.phalanx.dev.yaml"
wait_for 60 crd_established
"$BUILD/operator/phalanx-operator" --kubeconfig "$KUBECONFIG" --coordinator_address pod-ip \
  --coordinator_port_base $(( 20000 + (RANDOM % 4000) * 2 )) --metrics_listen 127.0.0.1:0 \
  >"$WORK/operator.out" 2>"$WORK/operator.log" &
PIDS+=($!)
for n in 0 1 2; do
  "$BUILD/node_agent/phalanx-agent" --kubeconfig "$KUBECONFIG" --node_name "node-$n" \
    --fake_gpus 4 --clique_socket "$WORK/agent-$n.sock" --metrics_listen 127.0.0.1:0 \
    >"$WORK/agent-$n.out" 2>"$WORK/agent-$n.log" &
  PIDS+=($!)
done
wait_for 30 grep -q '^ready ' "$WORK/operator.out"

step "quickstart: apply the sample job and look at it"
sed "s#/tmp/phalanx-checkpoints/sample#$WORK/checkpoints#; s#--steps=300#--steps=100000#" \
  "$SRC/examples/trainingjob.yaml" >"$WORK/trainingjob.yaml"
kubectl apply -f "$WORK/trainingjob.yaml"
wait_for 60 phase_is Running
kubectl get tj
kubectl get tj -A
kubectl get tj sample -o yaml | grep -q 'productiveSeconds' || fail "status has no productiveSeconds"
kubectl describe tj sample | grep -q 'Phase' || fail "describe tj shows no phase"
kubectl get pods -l phalanx.dev/job=sample -o wide
[[ $(kubectl get pods -l phalanx.dev/job=sample,phalanx.dev/role=task -o name | wc -l) == 4 ]] ||
  fail "expected 4 task pods"
kubectl get events --field-selector involvedObject.name=sample
# The pod runs before its worker has connected: give the log a moment.
wait_for 30 bash -c "kubectl logs sample-task-0-0 | grep -q 'kind=connected'" ||
  fail "worker log has no connected line"
kubectl get tj sample -o jsonpath='{range .status.tasks[*]}{.index} {.pod} {.node} {.incarnation} {.state}{"\n"}{end}'

step "operations: a hung task (SIGSTOP) is declared failed by the coordinator and restarted"
phalanx-localcluster admin stop-pod default/sample-task-2-0
wait_for 60 kubectl get pod sample-task-2-1
kubectl get tj sample -o jsonpath='{.status.tasks[2]}'
echo
[[ $(kubectl get tj sample -o jsonpath='{.status.tasks[2].incarnation}') == 1 ]] ||
  fail "task 2 is not at incarnation 1"
kubectl get events --field-selector involvedObject.name=sample,reason=TaskRestarted \
  | grep -q 'task 2' || fail "no TaskRestarted event for task 2"
kubectl get tj sample -o jsonpath='{range .status.tasks[*]}{.index} {.lastFailureReason} {.lastExitCode} {.lastFailureMessage}{"\n"}{end}'
[[ $(kubectl get tj sample -o jsonpath='{.status.tasks[2].lastFailureMessage}') == *heartbeat* ]] ||
  fail "task 2's lastFailureMessage does not quote the coordinator's heartbeat timeout"
wait_for 60 phase_is Running

step "operations: a crashed task (SIGKILL)"
phalanx-localcluster admin kill-pod default/sample-task-1-0
wait_for 60 kubectl get pod sample-task-1-1
wait_for 60 phase_is Running

step "operations: preemption through the node taint the agent sets"
node=$(kubectl get pod sample-task-3-0 -o jsonpath='{.spec.nodeName}')
kubectl taint nodes "$node" phalanx.dev/preempting=manual:NoSchedule
kubectl get nodes -o custom-columns='NAME:.metadata.name,TAINTS:.spec.taints[*].key'
wait_for 60 bash -c "[[ \$(kubectl get tj sample -o jsonpath='{.status.preemptions}') -ge 1 ]]"
kubectl get events --field-selector involvedObject.name=sample,reason=PreemptionNotice \
  | grep -q 'coordinated checkpoint' || fail "no PreemptionNotice event"
grep -h 'kind=sync_checkpoint' "$WORK"/cluster/logs/*.log | head -4
[[ -n $(grep -l 'kind=sync_checkpoint' "$WORK"/cluster/logs/*.log) ]] ||
  fail "no task checkpointed at the sync step"
kubectl taint nodes "$node" phalanx.dev/preempting-
wait_for 60 phase_is Running

step "user guide: suspend and resume"
kubectl patch tj sample --type merge -p '{"spec":{"suspend":true}}'
wait_for 60 phase_is Suspended
wait_for 60 bash -c "[[ -z \$(kubectl get pods -l phalanx.dev/job=sample,phalanx.dev/role=task \
  --field-selector=status.phase=Running -o name) ]]"
kubectl patch tj sample --type merge -p '{"spec":{"suspend":false}}'
wait_for 60 phase_is Running
kubectl get tj sample -o jsonpath='{.status.productiveSeconds} {.status.lostSeconds}{"\n"}'

step "operations: pending pods and the scheduler's message"
kubectl get pods -l phalanx.dev/job=sample --field-selector=status.phase=Pending
kubectl describe pod sample-task-0-1 | grep -q 'Events' || fail "describe pod shows no Events"

step "operations: the agent says no GPU"
phalanx-agent preflight
port=$(sed -n 's/^ready metrics=127.0.0.1:\([0-9]*\).*/\1/p' "$WORK/agent-0.out")
curl -s "http://127.0.0.1:$port/metrics" | grep -E '^phalanx_agent_(gpus|nvml_available)' ||
  fail "agent metrics missing"
kubectl get node node-0 -o jsonpath='{.status.conditions[?(@.type=="PhalanxGpuHealthy")]}' |
  grep -q PhalanxGpuHealthy || fail "node-0 has no PhalanxGpuHealthy condition"
echo

kubectl delete tj sample
OK=1
echo
echo "doc_commands: every command ran as documented"
