# The two commands a newcomer needs: `make demo` and `make test`. Both install what they need.
BUILD ?= build
BUILD_TYPE ?= RelWithDebInfo
CTEST_ARGS ?=

.PHONY: all deps configure build test demo demo-coordination bench bench-scale wheel images torch-image gpu-proof-bundle asan tsan fuzz format clean

all: build

deps:
	@scripts/install-deps.sh

configure: deps
	@cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) >/dev/null

build: configure
	@cmake --build $(BUILD)

# Deps, configure (-Werror), build, every test in parallel; ends with per-phase times and ctest's
# summary (docs/development.md: one test, labels, the time budget).
test:
	@scripts/test.sh $(BUILD) $(BUILD_TYPE) $(CTEST_ARGS)

# The operator on the local cluster (KEEP=1 leaves the cluster running for kubectl). Builds only
# what the demo runs; apt and compiler output go to $(BUILD)/logs/.
demo:
	@scripts/make_demo.sh $(BUILD) $(BUILD_TYPE) $(if $(filter 1,$(KEEP)),--keep)

# The coordination service alone (no Kubernetes): a kill, a restart, a preemption.
demo-coordination: build
	@$(BUILD)/examples/coord_demo/phalanx-coord-demo --bin_dir $(BUILD)

bench: build
	@cmake --build $(BUILD) --target phalanx_benches
	@mkdir -p $(BUILD)/bench
	@$(BUILD)/bench/phalanx-coord-bench --bin_dir $(BUILD) --out $(BUILD)/bench/coordination.json
	@$(BUILD)/bench/phalanx-operator-bench --bin_dir $(BUILD) --source_dir $(CURDIR) \
	  --out $(BUILD)/bench/operator.json
	@$(BUILD)/bench/phalanx-agent-bench --bin_dir $(BUILD) --source_dir $(CURDIR) \
	  --out $(BUILD)/bench/agent.json
	@/usr/bin/python3 bench/agent_xid_bench.py --build $(BUILD) --out $(BUILD)/bench/agent.json
	@/usr/bin/python3 bench/torch_bench.py --build $(BUILD) --out $(BUILD)/bench/torch.json
	@/usr/bin/python3 bench/peers_bench.py --build $(BUILD) --out $(BUILD)/bench/peers.json

# Costs vs N (issue 33; not part of `make bench`, ~15 min): the coordinator at 1,024-16,384 tasks
# and the operator at 125-1,000 jobs; build/bench/scale.json and a PNG per curve
# (docs/benchmarks.md, "Scale"). SCALE_ARGS passes flags to bench/scale.py (--only, --tasks, ...).
bench-scale: build
	@cmake --build $(BUILD) --target phalanx_benches
	@/usr/bin/python3 bench/scale.py --build $(BUILD) $(SCALE_ARGS)

# The Python package with libphalanx_c.so and its dependencies bundled (docs/pytorch.md):
# $(BUILD)/dist/phalanx-<version>-py3-none-manylinux_<glibc>_<arch>.whl.
wheel: build
	@python3 scripts/build_wheel.py --build $(BUILD)

# The operator, agent, coordinator and sample-worker images (buildah, FROM scratch, no daemon, no
# registry) as OCI archives in $(BUILD)/images/; docs/deploy.md says how to push them. Also the
# PyTorch worker image (its context always; the image where PHALANX_TORCH_BASE_IMAGE can be pulled).
images: build
	@scripts/build-images.sh $(BUILD)
	@scripts/build-torch-worker-image.sh $(BUILD)

# The PyTorch worker image from this machine's Debian packages (python3 + python3-torch + the
# wheel, ~1 GB; no registry): what the PyTorch job runs as containers on real nodes.
torch-image: build
	@PHALANX_TORCH_IMAGE_FROM_DEBIAN=1 scripts/build-torch-worker-image.sh $(BUILD)

# What scripts/gpu-proof.sh runs on a GPU machine, built here (docs/gpu-proof.md): the programs
# with their libraries and the wheel in $(BUILD)/gpu-proof, at most 48 MiB; builds only those.
GPU_PROOF_TARGETS = phalanx-coordinator phalanx-sample-worker phalanx-agent phalanx-nvml-probe \
  phalanx_clique_gpu_test phalanx_agent_gpu_real_test phalanx_c
gpu-proof-bundle: configure
	@cmake --build $(BUILD) --target $(GPU_PROOF_TARGETS)
	@python3 scripts/gpu_proof_bundle.py --build $(BUILD)

# Sanitizer builds (CMakePresets.json has the same configurations for IDEs).
asan: deps
	@cmake --preset asan >/dev/null && cmake --build --preset asan && cd build-asan && \
	  LSAN_OPTIONS=suppressions=$(CURDIR)/scripts/lsan.supp ctest --output-on-failure $(CTEST_ARGS)

tsan: deps
	@cmake --preset tsan >/dev/null && cmake --build --preset tsan && cd build-tsan && ctest --output-on-failure $(CTEST_ARGS)

# The fuzz targets (fuzz/) under clang + libFuzzer + ASan/UBSan in build-fuzz, FUZZ_SECONDS (60)
# each, one after another (docs/fuzzing.md). `make test` runs the same targets briefly (label fuzz).
fuzz: deps
	@scripts/run_fuzzers.sh build-fuzz

format:
	@git ls-files '*.cc' '*.h' | xargs clang-format -i

clean:
	rm -rf $(BUILD) build-asan build-tsan
