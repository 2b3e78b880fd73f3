# Quiet, timed steps for `make test` and `make demo` (sourced; bash). Each step's output goes to a
# log file under $STEPS_LOG_DIR (named on screen); the screen gets one progress line per step, and
# a failure prints the log's tail and path. STEPS_VERBOSE=1 streams everything instead.
#
#   step_begin NAME          start timing a phase ("deps", "configure", "build", "tests")
#   step_run LOG CMD...      run CMD with its output in $STEPS_LOG_DIR/LOG; on failure: tail, exit
#   step_build LOG CMD...    the same for a ninja build, with a "building N/M" progress line
#   step_end                 close the phase (its time goes into the summary)
#   steps_summary LABEL      "LABEL: deps 4s, configure 9s, build 6m12s, tests 7m01s, total 13m26s"

STEPS_LOG_DIR=${STEPS_LOG_DIR:-build/logs}
STEPS_NAMES=()
STEPS_SECONDS=()
STEPS_START_ALL=$(date +%s)
STEP_NAME=""
STEP_START=0
# Progress rewrites one line on a terminal; elsewhere (CI logs) it prints a line now and then.
if [[ -t 1 ]]; then STEPS_TTY=1; else STEPS_TTY=0; fi

steps_fmt() {  # seconds -> 7s | 3m05s
  local s=$1
  if ((s >= 60)); then printf '%dm%02ds' $((s / 60)) $((s % 60)); else printf '%ds' "$s"; fi
}

step_begin() {
  STEP_NAME=$1
  STEP_START=$(date +%s)
  mkdir -p "$STEPS_LOG_DIR"
}

step_end() {
  local took=$(($(date +%s) - STEP_START))
  STEPS_NAMES+=("$STEP_NAME")
  STEPS_SECONDS+=("$took")
  steps_line "$STEP_NAME: done in $(steps_fmt "$took")"
  steps_newline
}

steps_line() {  # the progress line
  if ((STEPS_TTY)); then printf '\r\033[K%s' "$*"; else printf '%s\n' "$*"; fi
}
steps_newline() { if ((STEPS_TTY)); then printf '\n'; fi; }

steps_fail() {  # LOG_PATH MESSAGE: the tail of the log (from ninja's first FAILED: when there is one)
  local log=$1
  shift
  steps_newline
  echo "$*" >&2
  if grep -q '^FAILED: ' "$log"; then
    sed -n '/^FAILED: /,$p' "$log" | head -n 80 >&2
  else
    tail -n 40 "$log" >&2
  fi
  echo "(the whole log: $log)" >&2
  exit 1
}

step_run() {
  local log="$STEPS_LOG_DIR/$1"
  shift
  steps_line "$STEP_NAME: $* (log: $log)"
  local rc=0
  if [[ "${STEPS_VERBOSE:-0}" == 1 ]]; then
    set +e
    "$@" 2>&1 | tee "$log"
    rc=${PIPESTATUS[0]}
    set -e
  else
    "$@" >"$log" 2>&1 || rc=$?
  fi
  ((rc == 0)) || steps_fail "$log" "$STEP_NAME failed (exit $rc): $*"
}

step_build() {
  local log="$STEPS_LOG_DIR/$1"
  shift
  : >"$log"
  local last_shown=-1 line done total pct
  # ninja's status lines start with "[N/M]"; everything goes to the log, the count to the screen.
  set +e
  NINJA_STATUS="[%f/%t] " "$@" 2>&1 | while IFS= read -r line; do
    printf '%s\n' "$line" >>"$log"
    [[ "${STEPS_VERBOSE:-0}" == 1 ]] && printf '%s\n' "$line"
    if [[ $line =~ ^\[([0-9]+)/([0-9]+)\] ]]; then
      done=${BASH_REMATCH[1]}
      total=${BASH_REMATCH[2]}
      pct=$((done * 100 / total))
      if ((STEPS_TTY)); then
        steps_line "$STEP_NAME: $done/$total (log: $log)"
      elif ((pct / 10 != last_shown)); then
        last_shown=$((pct / 10))
        steps_line "$STEP_NAME: $done/$total"
      fi
    fi
  done
  local rc=${PIPESTATUS[0]}
  set -e
  ((rc == 0)) || steps_fail "$log" "$STEP_NAME failed (exit $rc): $*"
}

steps_summary() {
  local total=$(($(date +%s) - STEPS_START_ALL)) parts=() i
  for i in "${!STEPS_NAMES[@]}"; do
    parts+=("${STEPS_NAMES[$i]} $(steps_fmt "${STEPS_SECONDS[$i]}")")
  done
  local joined
  joined=$(printf '%s, ' "${parts[@]}")
  echo "$1: ${joined}total $(steps_fmt "$total")"
}
