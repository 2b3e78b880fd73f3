#!/usr/bin/env bash
# GpuProof.DryRunPassesAndABrokenBundleFails: builds the GPU proof's bundle from this build tree,
# runs scripts/gpu-proof.sh --dry-run on it, and checks the report: no step failed, and the steps
# that have a fake here passed (NVML through the agent's loader, the agent's health loop, the
# coordinator and sample worker, and the PyTorch Manager with a recovery where torch is
# installed). Then a bundle with a library missing must make the proof fail, not pass.
# Exit 77 (skipped) when patchelf is missing (the bundle needs it).
set -eu
src=$1 build=$2
command -v patchelf >/dev/null || { echo "SKIP: patchelf is not installed (scripts/install-deps.sh)"; exit 77; }
dir="$build/gpu-proof-dry-run"
rm -rf "$dir"
mkdir -p "$dir"
fail() { echo "FAIL: $*"; cat "$dir"/out/gpu-proof-report.md 2>/dev/null; exit 1; }

python3 "$src/scripts/gpu_proof_bundle.py" --build "$build" --out "$dir/bundle" --allow-no-nccl
"$src/scripts/gpu-proof.sh" --dry-run --bundle "$dir/bundle" --out "$dir/out" ||
  fail "the dry run reported a failure"
report="$dir/out/gpu-proof-report.md"
grep -q '^- \*\*[0-9]* PASS, 0 FAIL, [0-9]* SKIP\*\*$' "$report" || fail "the report's summary"
for row in "bundle loads" "NVML through the agent's loader" "agent GPU health loop" \
           "coordinator + sample worker"; do
  grep -qF "| $row | PASS |" "$report" || fail "step \"$row\" did not pass"
done
if /usr/bin/python3 -c "import torch" 2>/dev/null; then
  for world in 1 2; do
    grep -qF "| torch Manager, world $world, gloo on cpu / recovery | PASS |" "$report" ||
      fail "the PyTorch Manager's recovery in world $world did not pass"
  done
else
  echo "NOTE: /usr/bin/python3 has no torch: the PyTorch Manager step was skipped"
fi
[ -s "$dir/out/gpu-proof.log" ] || fail "no log"
# Nothing the proof started outlives it (the agent of the health loop once did, every run).
if pgrep -f "$dir/bundle/bin/" >/dev/null; then
  pgrep -fa "$dir/bundle/bin/"
  pkill -f "$dir/bundle/bin/"
  fail "the proof left processes running"
fi
echo "PASS: the dry run: $(grep -o '[0-9]* PASS, 0 FAIL, [0-9]* SKIP' "$report")"

# A bundle that lost a library: the proof must say FAIL and exit 1 (a short budget: the first
# steps are enough).
cp -a "$dir/bundle" "$dir/broken"
rm "$dir/broken"/lib/libgrpc++.so.*
if "$src/scripts/gpu-proof.sh" --dry-run --bundle "$dir/broken" --out "$dir/broken-out" \
    --budget 15 >/dev/null; then
  fail "a bundle without libgrpc++ passed the proof"
fi
grep -qF "| bundle loads | FAIL |" "$dir/broken-out/gpu-proof-report.md" ||
  fail "the broken bundle's \"bundle loads\" step did not fail"
echo "PASS: a bundle without libgrpc++ fails the proof"
rm -rf "$dir"
