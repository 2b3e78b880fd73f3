# Helpers the demo scripts share (sourced by scripts/demo.sh, demo_real_nodes.sh, demo_torch.sh
# and tests/docs/doc_commands.sh). START (seconds since the epoch, with fractions) is when the
# demo began; KUBECTL is the kubectl command line to use.

calc() { awk "BEGIN { printf \"$1\", $2 }"; }
say() { printf '[%6.2fs] %s\n' "$(calc %.2f "$(date +%s.%N) - $START")" "$*"; }
# Waits up to $1 seconds for the command after it to succeed.
wait_for() {
  local limit=$1; shift
  local deadline=$(( $(date +%s) + limit ))
  until "$@" >/dev/null 2>&1; do
    if (( $(date +%s) > deadline )); then echo "demo: timed out waiting for: $*" >&2; return 1; fi
    sleep 0.2
  done
}
# True once the TrainingJob CRD is Established: a real API server serves the resource only then.
# (Polled: `kubectl wait --for condition=...` fails outright while the CRD has no
# status.conditions yet.)
crd_established() {
  [[ "$($KUBECTL get crd trainingjobs.phalanx.dev \
        -o 'jsonpath={.status.conditions[?(@.type=="Established")].status}')" == True ]]
}
# The sample job's status, through $KUBECTL.
job_field() { $KUBECTL get tj sample -o "jsonpath={$1}" 2>/dev/null; }
phase_is() { [[ "$(job_field .status.phase)" == "$1" ]]; }
preemptions_at_least() { [[ "$(job_field .status.preemptions)" -ge $1 ]]; }
# True once the job's coordinator pod is another one than uid $1, and Running: its successor.
coordinator_replaced() {
  [[ "$($KUBECTL get pod sample-coordinator -o jsonpath='{.metadata.uid} {.status.phase}')" == *" Running" &&
     "$($KUBECTL get pod sample-coordinator -o jsonpath='{.metadata.uid}')" != "$1" ]]
}
