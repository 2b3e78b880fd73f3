#!/usr/bin/env bash
# `make demo`: installs what is missing, builds only what the demo runs (CMake target
# phalanx_demo: the operator, agent, coordinator, local cluster, sample worker and the Python
# package's libphalanx_c.so; no tests, benches or fuzzers), then runs scripts/demo.sh.
#   scripts/make_demo.sh BUILD_DIR BUILD_TYPE [--keep]
# The screen shows the phases and the demo's story; apt and compiler output go to
# BUILD_DIR/logs/*.log (a failure prints the log's tail and path). STEPS_VERBOSE=1 streams them.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:?usage: make_demo.sh BUILD_DIR BUILD_TYPE [--keep]}
BUILD_TYPE=${2:?usage: make_demo.sh BUILD_DIR BUILD_TYPE [--keep]}
shift 2
STEPS_LOG_DIR="$BUILD/logs"
source scripts/steps_lib.sh

step_begin "installing dependencies"
step_run deps.log scripts/install-deps.sh
step_end

step_begin configuring
step_run configure.log cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE="$BUILD_TYPE"
step_end

step_begin building
step_build build.log cmake --build "$BUILD" --target phalanx_demo
step_end

# Real nodes run the sample job as containers from these images (scripts/demo_real_nodes.sh).
if [[ ${PHALANX_DEMO_NODES:-auto} != process ]] &&
   "$BUILD/tests/localcluster/phalanx-localcluster" check --nodes-kind real >/dev/null 2>&1; then
  step_begin "building images (real nodes)"
  step_run images.log scripts/build-images.sh "$BUILD"
  step_end
fi
steps_summary "setup"
echo

exec scripts/demo.sh "$BUILD" "$@"
