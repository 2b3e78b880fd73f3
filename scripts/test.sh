#!/usr/bin/env bash
# `make test`: installs what is missing, configures (warnings are errors), builds everything and
# runs every test in parallel; a test that failed there runs once more, alone. Ends with one line
# of per-phase times, then ctest's summary, then each failed test's last lines
# (scripts/failed_tests_why.py) and what the rerun found.
#   scripts/test.sh BUILD_DIR BUILD_TYPE [CTEST_ARGS...]
# Logs: BUILD_DIR/logs/{deps,configure,build,ctest,ctest-rerun}.log. STEPS_VERBOSE=1 streams apt and
# compiler output too. PHALANX_TEST_JOBS overrides how many tests run at once (docs/development.md
# says why the default is twice the core count).
set -euo pipefail
cd "$(dirname "$0")/.."
SRC=$(pwd)
BUILD=${1:?usage: test.sh BUILD_DIR BUILD_TYPE [CTEST_ARGS...]}
BUILD_TYPE=${2:?usage: test.sh BUILD_DIR BUILD_TYPE [CTEST_ARGS...]}
shift 2
STEPS_LOG_DIR="$BUILD/logs"
source scripts/steps_lib.sh

step_begin deps
step_run deps.log scripts/install-deps.sh
step_end

step_begin configure
step_run configure.log cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE="$BUILD_TYPE" \
  -DPHALANX_WERROR=ON
step_end

step_begin build
step_build build.log cmake --build "$BUILD"
step_end

# Most tests wait on processes, sockets and timers rather than compute, so twice the cores keeps
# the machine busy; at most two "heavy" tests (a real control plane, torch ranks, the clang
# check) run at once (tests/resources.json), and tests that need a fixed resource say so
# (RESOURCE_LOCK in CMake).
JOBS=${PHALANX_TEST_JOBS:-$(($(nproc) * 2))}
step_begin tests
echo "tests: ctest -j$JOBS (log: $BUILD/logs/ctest.log)"
touch "$STEPS_LOG_DIR/ctest.log.start"  # a failure list older than this is another run's
set +e
(cd "$BUILD" && ctest --output-on-failure --timeout 300 -j"$JOBS" \
  --resource-spec-file "$SRC/tests/resources.json" "$@") 2>&1 |
  tee "$STEPS_LOG_DIR/ctest.log"
rc=${PIPESTATUS[0]}
set -e
step_end
# ctest rewrites its record of the run on every call; the parallel run's is kept for the reasons.
FIRST_RUN_LOG="$STEPS_LOG_DIR/ctest-parallel-LastTest.log"
cp "$BUILD/Testing/Temporary/LastTest.log" "$FIRST_RUN_LOG" 2>/dev/null || true

# A test that failed beside 2x-cores others runs again, alone (PHALANX_RERUN_FAILED=0: no rerun).
# Why: on a 2-core machine a starved process can miss a deadline that no user would meet (a
# heartbeat, a scheduler pass); such a test is named below as failing under load, with its first
# run's reasons, and does not fail the run. A test that fails alone too fails the run, and so do
# more than MAX_RERUN failures (that is no load: nothing is rerun) or a run whose failures ctest
# did not list.
MAX_RERUN=5
failed_list=$(sed -n '/The following tests FAILED:/,/^Errors while running CTest/p' \
  "$STEPS_LOG_DIR/ctest.log" | grep -E '^[[:space:]]+[0-9]+ - ' || true)
failed_names=$(printf '%s\n' "$failed_list" | sed -nE 's/^[[:space:]]+[0-9]+ - (.*) \(.*\)$/\1/p')
# Tests that did not run because a fixture they need failed (ctest's "Not Run") follow it into
# the rerun but do not count toward MAX_RERUN.
failed_count=$(printf '%s' "$failed_list" | grep -vc '(Not Run)$' || true)
rerun_rc=$rc
if ((rc != 0)) && [[ ${PHALANX_RERUN_FAILED:-1} == 1 ]] && ((failed_count > 0)) &&
   ((failed_count <= MAX_RERUN)) &&
   [[ "$BUILD/Testing/Temporary/LastTestsFailed.log" -nt "$STEPS_LOG_DIR/ctest.log.start" ]]; then
  step_begin rerun
  echo "rerun: ctest --rerun-failed -j1 (log: $BUILD/logs/ctest-rerun.log)"
  set +e
  (cd "$BUILD" && ctest --rerun-failed --output-on-failure --timeout 300 -j1 \
    --resource-spec-file "$SRC/tests/resources.json" "$@") 2>&1 |
    tee "$STEPS_LOG_DIR/ctest-rerun.log"
  rerun_rc=${PIPESTATUS[0]}
  set -e
  step_end
fi

echo
steps_summary "make test"
# ctest's own closing lines last, so every reader of the run (people and CI) ends on them.
sed -n '/tests passed, /,$p' "$STEPS_LOG_DIR/ctest.log"
# Then, when something failed, each failed test's last lines: a CI log read by its tail names
# the failures and shows why, without the hundreds of lines between.
if ((rc != 0)); then
  python3 scripts/failed_tests_why.py "$FIRST_RUN_LOG" || true
  if ((rerun_rc == 0)); then
    echo
    echo "make test passed: the tests above failed beside the parallel load and passed when run"
    echo "again alone (each is a test to make robust under load):" $failed_names
  elif [[ -f "$STEPS_LOG_DIR/ctest-rerun.log" ]]; then
    echo
    echo "Run again alone, these failed too:"
    sed -n '/tests passed, /,$p' "$STEPS_LOG_DIR/ctest-rerun.log"
    python3 scripts/failed_tests_why.py "$BUILD/Testing/Temporary/LastTest.log" || true
  fi
fi
exit "$rerun_rc"
