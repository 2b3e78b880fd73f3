# Helpers the demo scripts share (sourced by scripts/demo.sh and scripts/demo_torch.sh).
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
