#!/usr/bin/env python3
"""Builds the GPU proof's bundle from a build tree (`make gpu-proof-bundle`):

    scripts/gpu_proof_bundle.py --build BUILD_DIR [--out DIR]
    scripts/gpu_proof_bundle.py --check DIR     (what gpu-proof.sh's first step runs there)

DIR (default BUILD_DIR/gpu-proof) then holds everything scripts/gpu-proof.sh runs on a GPU
machine where nothing can be built or installed (docs/gpu-proof.md):
- bin/: the coordinator, the sample worker, the node agent, phalanx-nvml-probe and the two
  GPU test programs, debug info stripped, each with RUNPATH $ORIGIN/../lib;
- lib/: every library they load that is not part of the base system (gRPC, protobuf, abseil,
  cpprest, OpenSSL, ...), RUNPATH $ORIGIN. That machine has a newer glibc and libstdc++, which
  these binaries accept; NCCL, CUDA and NVML are never bundled: they are loaded at run time from
  the machine's own (the nvidia-* wheels beside its torch, the driver's libnvidia-ml);
- wheel/: the phalanx wheel (scripts/build_wheel.py);
- MANIFEST.txt: the commit, the files and their sizes.
Fails when the bundle is over 48 MiB (a device call carries at most 64 MiB), when a bundled
program would load a library from outside the bundle other than the base system's, or when the
build did not see nccl.h (its NCCL loader would only ever say Unavailable)."""

import argparse
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from build_wheel import SRC, SYSTEM_LIBRARIES, fail, resolved_dependencies, run  # noqa: E402

PROGRAMS = [
    "runtime/coordination/phalanx-coordinator",
    "examples/sample_worker/phalanx-sample-worker",
    "node_agent/phalanx-agent",
    "node_agent/gpu/phalanx-nvml-probe",
    "runtime/clique/phalanx_clique_gpu_test",
    "node_agent/gpu/phalanx_agent_gpu_real_test",
]
# The targets `make gpu-proof-bundle` builds: the programs and the wheel's library.
TARGETS = [os.path.basename(p) for p in PROGRAMS] + ["phalanx_c"]
LIMIT_BYTES = 48 * 1024 * 1024


def nccl_header_seen(build):
    with open(os.path.join(build, "CMakeCache.txt")) as f:
        for line in f:
            if line.startswith("PHALANX_NCCL_INCLUDE_DIR:"):
                return not line.strip().endswith("NOTFOUND")
    return False


def loaded_from_outside(bundle):
    """One line per library a program in ``bundle``/bin would load from anywhere but
    ``bundle``/lib or the base system, with no help from the environment (a clean
    LD_LIBRARY_PATH), as on the GPU machine; "not found" counts as outside."""
    lib_dir = os.path.join(os.path.realpath(bundle), "lib")
    bin_dir = os.path.join(bundle, "bin")
    env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
    outside = []
    for name in sorted(os.listdir(bin_dir)):
        ldd = subprocess.run(["ldd", os.path.join(bin_dir, name)], env=env, check=True,
                             capture_output=True, text=True).stdout
        for line in ldd.splitlines():
            parts = line.split()
            if len(parts) < 3 or parts[1] != "=>" or parts[0] in SYSTEM_LIBRARIES:
                continue
            if os.path.dirname(os.path.realpath(parts[2])) != lib_dir:
                outside.append("bin/%s loads %s from outside the bundle: %s" % (
                    name, parts[0], line.strip()))
    return outside


def check(bundle):
    outside = loaded_from_outside(bundle)
    for line in outside:
        print("FAIL: " + line)
    if outside:
        sys.exit(1)
    print("ok: every program in bin/ loads its libraries from the bundle (%d bundled)" %
          len(os.listdir(os.path.join(bundle, "lib"))))


def size_of(tree):
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(tree) for f in files)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build", help="the CMake build directory")
    parser.add_argument("--out", help="the bundle's directory (default BUILD/gpu-proof)")
    parser.add_argument("--allow-no-nccl", action="store_true",
                        help="bundle a build without nccl.h (the dry run's test only)")
    parser.add_argument("--check", metavar="DIR",
                        help="only check that the bundle in DIR loads nothing from outside it")
    args = parser.parse_args()
    if args.check:
        return check(args.check)
    if not args.build:
        parser.error("--build (or --check) is required")
    build = os.path.abspath(args.build)
    out = os.path.abspath(args.out or os.path.join(build, "gpu-proof"))
    if not nccl_header_seen(build) and not args.allow_no_nccl:
        fail("this build did not find nccl.h (CUDA Toolkit and NCCL under /usr/local/cuda): "
             "its NCCL loader would only say Unavailable on a GPU machine")
    shutil.rmtree(out, ignore_errors=True)
    bin_dir, lib_dir = os.path.join(out, "bin"), os.path.join(out, "lib")
    os.makedirs(bin_dir)
    os.makedirs(lib_dir)

    libraries = {}
    for program in PROGRAMS:
        source = os.path.join(build, program)
        if not os.path.exists(source):
            fail("%s is not built (make gpu-proof-bundle builds it)" % source)
        target = os.path.join(bin_dir, os.path.basename(program))
        shutil.copy2(source, target)
        run("strip", "--strip-debug", target)
        run("patchelf", "--set-rpath", "$ORIGIN/../lib", target)
        for soname, path in resolved_dependencies(source).items():
            if soname not in SYSTEM_LIBRARIES:
                libraries[soname] = path
    for soname, path in sorted(libraries.items()):
        target = os.path.join(lib_dir, soname)
        shutil.copyfile(os.path.realpath(path), target)
        os.chmod(target, 0o755)
        run("strip", "--strip-debug", target)
        run("patchelf", "--set-rpath", "$ORIGIN", target)

    outside = loaded_from_outside(out)
    if outside:
        fail(outside[0])

    wheel = run(sys.executable, os.path.join(SRC, "scripts", "build_wheel.py"), "--build", build,
                "--out", os.path.join(out, "wheel")).strip().splitlines()[-1]

    commit = subprocess.run(["git", "-C", SRC, "describe", "--always", "--dirty"],
                            capture_output=True, text=True).stdout.strip() or "unknown"
    with open(os.path.join(out, "MANIFEST.txt"), "w") as f:
        f.write("phalanx GPU proof bundle, commit %s, nccl.h seen: %s\n" % (
            commit, "yes" if nccl_header_seen(build) else "no"))
        for d, _, files in sorted(os.walk(out)):
            for name in sorted(files):
                path = os.path.join(d, name)
                f.write("%10d %s\n" % (os.path.getsize(path), os.path.relpath(path, out)))
    total = size_of(out)
    if total > LIMIT_BYTES:
        fail("the bundle is %.1f MiB, over its %d MiB" % (total / 2**20, LIMIT_BYTES // 2**20))
    print("gpu_proof_bundle: %d programs, %d libraries, %s; %.1f MiB in %s" % (
        len(PROGRAMS), len(libraries), os.path.basename(wheel), total / 2**20, out))
    print(out)


if __name__ == "__main__":
    main()
