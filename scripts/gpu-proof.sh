#!/usr/bin/env bash
# The GPU proof (docs/gpu-proof.md): runs the GPU paths of Phalanx on a GPU machine from the
# bundle `make gpu-proof-bundle` built, nothing built or installed there, and writes one report.
#
#   scripts/gpu-proof.sh [--dry-run] [--bundle DIR] [--out DIR] [--budget SECONDS]
#
#   --bundle  the bundle (default: build/gpu-proof)
#   --out     where gpu-proof-report.md and gpu-proof.log go (default: $OUT, else ./gpu-proof-out)
#   --budget  seconds for the whole proof (default 450); a step that would start after it is
#             SKIP ("out of time"), and every step has its own deadline
#   --dry-run the same steps on a CPU machine: fake GPUs for NVML and the agent, gloo on the CPU
#             for the PyTorch Manager; the GPU-only programs say SKIP with their reason
#
# Every step prints PASS, FAIL or SKIP with its reason. Exit status: 1 when a step failed, else 0.
set -u
set -o pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(dirname "$here")
bundle="$repo/build/gpu-proof"
out="${OUT:-$PWD/gpu-proof-out}"
budget=450
dry_run=0
while [ $# -gt 0 ]; do
  case "$1" in
    --dry-run) dry_run=1 ;;
    --bundle) bundle=$2; shift ;;
    --out) out=$2; shift ;;
    --budget) budget=$2; shift ;;
    -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
    *) echo "gpu-proof: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done
bundle=$(cd "$bundle" 2>/dev/null && pwd) || { echo "gpu-proof: no bundle at $bundle (make gpu-proof-bundle)" >&2; exit 2; }
[ -x "$bundle/bin/phalanx-coordinator" ] || { echo "gpu-proof: $bundle is not a bundle" >&2; exit 2; }
mkdir -p "$out"
out=$(cd "$out" && pwd)
report="$out/gpu-proof-report.md"
log="$out/gpu-proof.log"
work=$(mktemp -d "${TMPDIR:-/tmp}/phalanx-gpu-proof.XXXXXX")
trap 'rm -rf "$work"' EXIT
trap 'exit 130' INT TERM
: >"$log"
started=$(date +%s)
passed=0 failed=0 skipped=0
bundle_broken=0
rows=()

# The Python that has torch: Debian's for the dry run (its python3-torch), else the machine's.
python=python3
if [ "$dry_run" = 1 ] && [ -x /usr/bin/python3 ]; then python=/usr/bin/python3; fi

note() { printf '%s\n' "$*" | tee -a "$log"; }

# record VERDICT STEP SECONDS DETAIL
record() {
  local detail=${4//|/\\|}
  rows+=("| $2 | $1 | $3 | ${detail:0:400} |")
  case "$1" in PASS) passed=$((passed + 1)) ;; FAIL) failed=$((failed + 1)) ;; *) skipped=$((skipped + 1)) ;; esac
  note "$1: $2 ($3 s): $4"
}

# step NAME TIMEOUT COMMAND...: runs COMMAND under its deadline; exit 0 PASS, 77 SKIP, anything
# else FAIL. The detail is the command's last line starting with PASS/FAIL/SKIP/ok, or its last
# line. gtest programs: all cases skipped is SKIP (with gtest's reason), each case's time is kept.
step() {
  local name=$1 limit=$2
  shift 2
  local now; now=$(date +%s)
  if [ "$bundle_broken" = 1 ]; then
    record SKIP "$name" 0 "the bundle does not load (first step)"
    return
  fi
  if [ "${budget_exempt:-0}" != 1 ] && [ $((now - started + 5)) -gt "$budget" ]; then
    record SKIP "$name" 0 "out of time: the proof's budget of ${budget} s is spent"
    return
  fi
  note "== $name: $*"
  local t0 rc output
  t0=$(date +%s%N)
  # timeout signals its whole process group: a step's helpers (an agent, ranks) end with it.
  output=$(timeout -k 5 "$limit" bash -c '"$@"' _ "$@" 2>&1)
  rc=$?
  printf '%s\n' "$output" >>"$log"
  local ms=$((($(date +%s%N) - t0) / 1000000))
  local seconds="$((ms / 1000)).$((ms % 1000 / 100))"
  local detail
  detail=$(printf '%s\n' "$output" | grep -E '^(PASS|FAIL|SKIP|ok|preflight)' | tail -1)
  [ -n "$detail" ] || detail=$(printf '%s\n' "$output" | grep -v '^\s*$' | tail -1)
  if printf '%s\n' "$output" | grep -q '^\[==========\] .* ran\.'; then
    local cases skips
    cases=$(printf '%s\n' "$output" | grep -E '^\[ +(OK|FAILED|SKIPPED) +\] [A-Za-z]' |
      sed -E 's/^\[ +([A-Z]+) +\] ([^ ]+) \(([0-9]+) ms\)$/\2: \1 \3 ms/' | tr '\n' ';')
    skips=$(printf '%s\n' "$output" | grep -E '^\[  SKIPPED \] [0-9]+ test' | head -1)
    if [ $rc = 0 ] && [ -n "$skips" ] && ! printf '%s\n' "$output" | grep -q '^\[  PASSED  \] [1-9]'; then
      rc=77
      detail=$(printf '%s\n' "$output" | grep -A1 -E ': Skipped$' | grep -v ': Skipped$' | head -1)
    else  # each case's time, and the timings the GPU tests print ("init 12.3 ms, ...")
      detail="$cases $(printf '%s\n' "$output" | grep -E '^[a-z].* [0-9.]+ ms' | tr '\n' ';')"
    fi
  fi
  # The agent's preflight says "skipped" and exits 0 on a machine without GPUs.
  if [ $rc = 0 ] && printf '%s\n' "$detail" | grep -q '^preflight: skipped'; then rc=77; fi
  case $rc in
    0) record PASS "$name" "$seconds" "$detail" ;;
    77) record SKIP "$name" "$seconds" "$detail" ;;
    124|137) record FAIL "$name" "$seconds" "timed out after ${limit} s; last: $detail" ;;
    *) record FAIL "$name" "$seconds" "exit $rc: $detail" ;;
  esac
}

# -- what the machine has --------------------------------------------------------------------
find_lib() {  # find_lib NAME DIR...: the first DIR/NAME that exists
  local name=$1 d
  shift
  for d in "$@"; do
    if [ -e "$d/$name" ]; then echo "$d/$name"; return; fi
  done
}
# NCCL and the CUDA runtime: the nvidia-* wheels beside the machine's torch, else the toolkit.
wheel_libs=$("$python" - <<'EOF' 2>/dev/null
import glob, os, site, sys
roots = [p for p in site.getsitepackages() + [site.getusersitepackages()] + sys.path if os.path.isdir(p)]
found = {}
for root in roots:
    for pattern in ("libnccl.so.2", "libcudart.so.1[0-9]*"):
        for path in sorted(glob.glob(os.path.join(root, "nvidia", "**", pattern), recursive=True)):
            found.setdefault(pattern, os.path.dirname(path))
print(" ".join(sorted(set(found.values()))))
EOF
)
nvml=$(find_lib libnvidia-ml.so.1 /usr/local/nvidia/lib64 /usr/local/nvidia/lib /usr/lib/x86_64-linux-gnu /usr/lib64)
gpu_path=""
for d in $wheel_libs /usr/local/cuda/lib64; do [ -d "$d" ] && gpu_path="$gpu_path${gpu_path:+:}$d"; done
[ -n "$nvml" ] && gpu_path="$gpu_path${gpu_path:+:}$(dirname "$nvml")"
# Only our programs get this path; Python keeps its own (torch finds its libraries itself).
ours() { LD_LIBRARY_PATH="$gpu_path" "$@"; }
if [ "$dry_run" = 1 ]; then
  # Shorter on the CPU (the kill comes at step 12 either way): the dry run proves the kit's
  # machinery, and CI's time budget pays for it.
  fakes="--fake_gpus=2" torch_args="--device cpu --backend gloo --worlds 1,2 --steps 20"
else
  fakes="--nvml_path=${nvml:-libnvidia-ml.so.1}" torch_args="--device cuda --backend nccl --worlds 1,2 --steps 30"
fi
# Steps run under `timeout bash -c`: what their functions use is exported.
export bundle work gpu_path python here dry_run fakes torch_args
export -f ours

note "gpu-proof: bundle $(head -1 "$bundle/MANIFEST.txt" 2>/dev/null)"
note "gpu-proof: $( [ $dry_run = 1 ] && echo 'DRY RUN (fakes, CPU)' || echo 'on the GPU machine' ), python $python, NVML ${nvml:-not found}, GPU library path ${gpu_path:-none}"
facts=$( (nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || echo "nvidia-smi: none") | head -4 | tr '\n' ';')
torch_facts=$("$python" -c 'import torch; print("torch %s, CUDA %s, available %s, NCCL %s" % (torch.__version__, torch.version.cuda, torch.cuda.is_available(), torch.cuda.nccl.version() if torch.cuda.is_available() else "-"))' 2>&1 | tail -1)
note "gpu-proof: $facts $torch_facts"

# -- the steps -------------------------------------------------------------------------------
# Every library a program loads comes from the bundle's lib/, or is the base system's (glibc,
# libstdc++, libgcc_s: newer there than here, which these programs accept): the bundle
# script's own check (stdlib Python, so it runs there too).
bundle_loads() { "$python" "$here/gpu_proof_bundle.py" --check "$bundle"; }
export -f bundle_loads
# Nothing else means anything unless the bundle loads: this step runs whatever the budget (a
# loaded machine once spent a short budget before it, so a broken bundle "passed" with every
# step out of time), and when it fails the other steps are SKIP, not each a FAIL of one cause.
budget_exempt=1 step "bundle loads" 30 bundle_loads
[ "$failed" = 0 ] || bundle_broken=1

nvml_probe() {
  # shellcheck disable=SC2086  # $fakes is one flag
  ours "$bundle/bin/phalanx-nvml-probe" $fakes --xid_poll=2s >"$work/probe.json" || {
    cat "$work/probe.json"; return 1; }
  cat "$work/probe.json"
  echo "ok: $(grep -o '"uuid": "[^"]*"' "$work/probe.json" | wc -l) GPUs read through NvmlLoader"
}
export -f nvml_probe
step "NVML through the agent's loader" 30 nvml_probe
if [ -s "$work/probe.json" ]; then
  step "NVML agrees with nvidia-ml-py" 30 "$python" "$here/gpu_proof/nvml_compare.py" "$work/probe.json"
fi
step "NVML tests (gtest, label gpu)" 60 ours "$bundle/bin/phalanx_agent_gpu_real_test"
step "NCCL tests (gtest, label gpu)" 180 ours "$bundle/bin/phalanx_clique_gpu_test"
step "agent preflight (all-reduce over every GPU)" 120 ours "$bundle/bin/phalanx-agent" preflight

# The node agent's health loop against the device (fake GPUs in the dry run) for a few seconds,
# read back through its metrics.
agent_health() {
  # Not through `ours`: a backgrounded function is a subshell, and killing it would leave the
  # agent running.
  LD_LIBRARY_PATH="$gpu_path" "$bundle/bin/phalanx-agent" --kube=false --notice_sources= --node_name=gpu-proof \
    --metrics_listen=127.0.0.1:0 --clique_socket="$work/cliques.sock" --poll_interval=500ms \
    $fakes >"$work/agent.out" 2>"$work/agent.err" &
  local agent_pid=$!
  local port="" i
  for i in $(seq 1 100); do
    port=$(grep -o 'ready metrics=[0-9.]*:[0-9]*' "$work/agent.out" 2>/dev/null | sed 's/.*://')
    [ -n "$port" ] && break
    kill -0 "$agent_pid" 2>/dev/null || break
    sleep 0.1
  done
  if [ -z "$port" ]; then cat "$work/agent.err"; echo "FAIL: the agent did not start"; return 1; fi
  sleep 4
  local metrics
  metrics=$("$python" -c "import urllib.request,sys; print(urllib.request.urlopen('http://127.0.0.1:$port/metrics', timeout=5).read().decode())")
  kill "$agent_pid"; wait "$agent_pid" 2>/dev/null
  cat "$work/agent.err"
  printf '%s\n' "$metrics" | grep -E '^phalanx_agent_(gpus|gpu_health|nvml_available|xid_errors_total|check_ok)'
  local gpus healthy
  gpus=$(printf '%s\n' "$metrics" | awk '$1 == "phalanx_agent_gpus" {print $2}')
  healthy=$(printf '%s\n' "$metrics" | awk '$1 == "phalanx_agent_gpu_health{health=\"healthy\"}" {print $2}')
  if [ -z "$gpus" ] || [ "$gpus" = 0 ]; then echo "FAIL: the agent saw no GPU"; return 1; fi
  if [ "$gpus" != "$healthy" ]; then echo "FAIL: $healthy of $gpus GPUs healthy"; return 1; fi
  echo "ok: the agent's health loop ran 4 s: $gpus GPUs, all healthy"
}
export -f agent_health
step "agent GPU health loop" 30 agent_health

# A one-task job of the sample worker on the coordinator: the bundle's programs run there.
coordinator_smoke() {
  printf 'proof-token\n' >"$work/token"
  "$bundle/bin/phalanx-coordinator" --listen=127.0.0.1:0 --metrics_listen= --job=smoke \
    --num_tasks=1 --token_file="$work/token" >"$work/coord.out" 2>"$work/coord.err" &
  local coord=$! address="" i
  for i in $(seq 1 100); do
    address=$(grep -o 'grpc=[^ ]*' "$work/coord.out" 2>/dev/null | sed 's/grpc=//')
    [ -n "$address" ] && break
    sleep 0.1
  done
  PHALANX_COORDINATOR=$address PHALANX_JOB=smoke PHALANX_TASK_ID=0 PHALANX_NUM_TASKS=1 \
    PHALANX_INCARNATION=0 PHALANX_TOKEN=proof-token \
    "$bundle/bin/phalanx-sample-worker" --steps=20 --step_time=10ms --checkpoint_dir="$work/ckpt" \
    --agent_devices=none
  local rc=$?
  kill "$coord"; wait "$coord" 2>/dev/null
  [ $rc = 0 ] && echo "ok: a 1-task sample-worker job finished on the bundled coordinator ($address)"
  return $rc
}
export -f coordinator_smoke
step "coordinator + sample worker" 60 coordinator_smoke

# The PyTorch Manager: the wheel unpacked (a wheel is a zip; no pip needed, nothing installed).
"$python" -c "import zipfile,sys; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])" \
  "$(ls "$bundle"/wheel/phalanx-*.whl | head -1)" "$work/site" >>"$log" 2>&1
torch_manager() {
  if ! "$python" -c "import torch" 2>/dev/null; then echo "SKIP: $python cannot import torch"; return 77; fi
  if [ "$dry_run" = 0 ] && ! "$python" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"; then
    echo "FAIL: torch sees no CUDA device"; return 1
  fi
  PYTHONPATH="$work/site" "$python" "$here/gpu_proof/torch_manager_proof.py" \
    --coordinator "$bundle/bin/phalanx-coordinator" --out "$work/torch" --timeout 90 $torch_args
  local rc=$?
  grep -h -E 'Error|error' "$work"/torch/*/task-*.log 2>/dev/null | tail -5
  return $rc
}
export -f torch_manager
step "PyTorch Manager (world 1 and 2, a recovery each)" 300 torch_manager
# Its checks, one row each.
grep -E '^(PASS|FAIL|SKIP): torch Manager' "$log" | while IFS= read -r line; do echo "$line"; done >"$work/torch.rows"
while IFS= read -r line; do  # "VERDICT: torch Manager, WHAT: DETAIL"
  rest=${line#*: }
  rows+=("| ${rest%%: *} | ${line%%:*} | | ${rest#*: } |")
done <"$work/torch.rows"

# -- the report ------------------------------------------------------------------------------
elapsed=$(( $(date +%s) - started ))
{
  echo "# Phalanx GPU proof$( [ $dry_run = 1 ] && echo ' (dry run: fakes on a CPU machine)')"
  echo
  echo "- $(date -u +%Y-%m-%dT%H:%M:%SZ), $(uname -n), ${elapsed} s of ${budget}"
  echo "- bundle: $(head -1 "$bundle/MANIFEST.txt" 2>/dev/null)"
  echo "- GPUs: ${facts}"
  echo "- $torch_facts"
  echo "- NVML: ${nvml:-not found}; GPU libraries: ${gpu_path:-none}"
  echo "- **${passed} PASS, ${failed} FAIL, ${skipped} SKIP**"
  echo
  echo "| step | verdict | s | detail |"
  echo "|---|---|---|---|"
  printf '%s\n' "${rows[@]}"
} >"$report"
note "gpu-proof: ${passed} PASS, ${failed} FAIL, ${skipped} SKIP in ${elapsed} s; report $report, log $log"
[ "$failed" = 0 ]
