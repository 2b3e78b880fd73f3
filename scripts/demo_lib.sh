# Helpers the demo scripts share (sourced by scripts/demo.sh, demo_real_nodes.sh and demo_torch.sh).
# START (seconds since the epoch, with fractions) is when the demo began.

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
# The sample job's status, through $KUBECTL.
job_field() { $KUBECTL get tj sample -o "jsonpath={$1}" 2>/dev/null; }
phase_is() { [[ "$(job_field .status.phase)" == "$1" ]]; }
preemptions_at_least() { [[ "$(job_field .status.preemptions)" -ge $1 ]]; }
# True once the job's coordinator pod is another one than uid $1, and Running: its successor.
coordinator_replaced() {
  [[ "$($KUBECTL get pod sample-coordinator -o jsonpath='{.metadata.uid} {.status.phase}')" == *" Running" &&
     "$($KUBECTL get pod sample-coordinator -o jsonpath='{.metadata.uid}')" != "$1" ]]
}
