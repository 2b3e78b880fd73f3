#!/bin/bash
# `make fuzz`: builds the fuzz targets (fuzz/) with clang, libFuzzer, ASan and UBSan in their own
# build directory and runs each for FUZZ_SECONDS on its checked-in corpus, one at a time.
#   scripts/run_fuzzers.sh [BUILD_DIR] [TARGET...]      (default build-fuzz, every target)
#   FUZZ_SECONDS=60 (per target)  FUZZ_ARGS="-max_len=8192 ..." (more libFuzzer flags)
# New inputs libFuzzer finds go to BUILD_DIR/fuzz-corpus/<name>/ (the checked-in corpus is only
# read); crashes to BUILD_DIR/fuzz-artifacts/crash-<name>-<sha1>. docs/fuzzing.md says how to turn
# a crash into a regression case. Exits non-zero when any target crashed.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build-fuzz}
shift || true
SECONDS_EACH=${FUZZ_SECONDS:-60}
CXX_BIN=${FUZZ_CXX:-clang++}
CC_BIN=${FUZZ_CC:-clang}
command -v "$CXX_BIN" >/dev/null || { echo "make fuzz needs clang ($CXX_BIN not found)" >&2; exit 1; }

# -fsanitize=fuzzer-no-link instruments every library for coverage; the targets themselves link
# libFuzzer (fuzz/CMakeLists.txt). UBSan findings abort so libFuzzer records them as crashes.
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_COMPILER="$CC_BIN" -DCMAKE_CXX_COMPILER="$CXX_BIN" \
  -DPHALANX_SANITIZE=address,undefined -DPHALANX_LIBFUZZER=ON \
  -DCMAKE_C_FLAGS="-fsanitize=fuzzer-no-link -fno-sanitize-recover=undefined" \
  -DCMAKE_CXX_FLAGS="-fsanitize=fuzzer-no-link -fno-sanitize-recover=undefined" >/dev/null
cmake --build "$BUILD" --target phalanx_fuzz_targets

targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  for dir in fuzz/corpus/*/; do targets+=("$(basename "$dir")"); done
fi
mkdir -p "$BUILD/fuzz-artifacts"
failed=()
for name in "${targets[@]}"; do
  mkdir -p "$BUILD/fuzz-corpus/$name"
  echo "=== $name: ${SECONDS_EACH}s"
  # Leaks are not findings here (gRPC and protobuf keep process-lifetime state).
  if ! ASAN_OPTIONS=detect_leaks=0 "$BUILD/fuzz/phalanx_fuzz_$name" \
      -max_total_time="$SECONDS_EACH" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
      -artifact_prefix="$BUILD/fuzz-artifacts/crash-$name-" ${FUZZ_ARGS:-} \
      "$BUILD/fuzz-corpus/$name" "fuzz/corpus/$name"; then
    failed+=("$name")
  fi
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "crashed: ${failed[*]} (inputs in $BUILD/fuzz-artifacts/)" >&2
  exit 1
fi
echo "no crashes in: ${targets[*]}"
