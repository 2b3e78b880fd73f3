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

# timeline_picture LOG_DIR OUT.png PREEMPTED_NODE COORDINATOR_NODE: the sample job's story as a
# picture (scripts/timeline_plot.py; KILL_AT, PREEMPT_AT, MOVE_AT mark the faults), its path or
# why there is none printed.
timeline_picture() {
  local productive lost
  productive=$(job_field .status.productiveSeconds)
  lost=$(job_field .status.lostSeconds)
  if python3 "$SRC/scripts/timeline_plot.py" "$1" sample "$2" \
      --fault "kill task 1@$KILL_AT" --fault "preempt $3@$PREEMPT_AT" \
      --fault "preempt $4 (coordinator)@$MOVE_AT" \
      --title "$(printf 'TrainingJob sample: %s restart(s), %s preemption(s), goodput %.0f%%' \
        "$(job_field .status.restarts)" "$(job_field .status.preemptions)" \
        "$(calc %.1f "100 * ${productive:-0} / (${productive:-0} + ${lost:-0} + 0.0001)")")" \
      2>"${2%.png}.log"; then
    echo "  timeline picture: $2"
  else
    echo "  timeline picture: not made ($(tail -n 1 "${2%.png}.log"))"
  fi
}
