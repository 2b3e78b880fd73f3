"""The wheel as a user gets it (issue 18): scripts/build_wheel.py builds it from the build tree,
pip installs it into a fresh venv (torch from the system site packages, as in an image that has
torch already), and the torch tests run from the installed package with no source package, no
build-tree library and no LD_LIBRARY_PATH on any path: PHALANX_BUILD_DIR is only where the tests
find the phalanx-coordinator binary they start.

Checked on the installed library: every dependency resolves into the bundle or to the base
system (ldd), and it exports the C ABI only (nm -D).

Exits 77 (CTest: skipped) with the reason when torch or patchelf is missing."""

import os
import re
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import harness  # noqa: E402

TESTS = ["tests.test_torch_store", "tests.test_torch_recovery", "tests.test_launch"]
SYSTEM = ("linux-vdso.so.1", "ld-linux", "libc.so.6", "libm.so.6", "libgcc_s.so.1",
          "libstdc++.so.6", "libdl.so.2", "libpthread.so.0", "librt.so.1")


def check(condition, message):
    if not condition:
        sys.exit("FAIL: " + message)


def run(argv, **kwargs):
    print("+ " + " ".join(argv), flush=True)
    return subprocess.run(argv, check=True, **kwargs)


def main():
    harness.require_torch()
    if shutil.which("patchelf") is None:
        print("SKIP: patchelf is not installed (scripts/install-deps.sh installs it)")
        sys.exit(77)
    with tempfile.TemporaryDirectory(prefix="phalanx-wheel-") as tmp:
        out = run([sys.executable, os.path.join(harness.REPO, "scripts", "build_wheel.py"),
                   "--build", harness.BUILD, "--out", os.path.join(tmp, "dist")],
                  capture_output=True, text=True).stdout
        print(out, end="")
        wheel = out.strip().splitlines()[-1]
        check(re.search(r"/phalanx-[\d.]+-py3-none-manylinux_\d+_\d+_\w+\.whl$", wheel),
              "unexpected wheel name " + wheel)

        venv = os.path.join(tmp, "venv")
        run([sys.executable, "-m", "venv", "--system-site-packages", venv])
        python = os.path.join(venv, "bin", "python")
        run([python, "-m", "pip", "install", "--quiet", "--no-index", "--no-deps", wheel])

        # A tree with the tests and examples but no phalanx package: `import phalanx` can only
        # find the installed one.
        tree = os.path.join(tmp, "src", "runtime", "python")
        shutil.copytree(HERE, os.path.join(tree, "tests"))
        shutil.copytree(os.path.join(harness.PYTHON_DIR, "examples"),
                        os.path.join(tree, "examples"))
        env = {k: v for k, v in os.environ.items()
               if k not in ("PYTHONPATH", "PHALANX_LIBRARY", "LD_LIBRARY_PATH")}
        env.update(PHALANX_TEST_INSTALLED="1", PHALANX_BUILD_DIR=harness.BUILD)

        library = run([python, "-c", "import phalanx; print(phalanx.find_library())"],
                      env=env, cwd=tree, capture_output=True, text=True).stdout.strip()
        check(library.startswith(os.path.realpath(venv)) or library.startswith(venv),
              "phalanx loaded %s, not the installed library" % library)
        libs_dir = os.path.dirname(library)
        for line in run(["ldd", library], capture_output=True, text=True).stdout.splitlines():
            name = os.path.basename(line.split()[0])
            inside = "=> " + libs_dir + "/" in line
            check(inside or name.startswith(SYSTEM),
                  "the installed library resolves %s outside the bundle: %s" % (name, line))
            check(harness.BUILD not in line, "resolved into the build tree: " + line)
        exported = run(["nm", "-D", "--defined-only", library], capture_output=True,
                       text=True).stdout.split("\n")
        names = [line.split()[-1] for line in exported if line.strip()]
        check(names and all(n.startswith("phalanx_") for n in names),
              "exports beyond the C ABI: %s" % [n for n in names if not n.startswith("phalanx_")])
        print("installed library %s: %d symbols exported, dependencies in the bundle" % (
            library, len(names)), flush=True)

        # The console scripts and torch's entry point for the rendezvous backend.
        for script in ("phalanx-launch", "phalanx-torchrun"):
            out = run([os.path.join(venv, "bin", script), "--help"], env=env, cwd=tree,
                      capture_output=True, text=True).stdout
            check("usage: " + script in out, "%s --help printed %r" % (script, out[:200]))
        handlers = run([python, "-c", "from importlib.metadata import entry_points; "
                        "print([e.value for e in entry_points(group='torchrun.handlers')])"],
                       env=env, cwd=tree, capture_output=True, text=True).stdout
        check("phalanx.torchrun:handler_creator" in handlers, "entry points: " + handlers)

        run([python, "-m", "unittest", "-v"] + TESTS, env=env, cwd=tree)
    print("PASS: the torch tests pass from the installed wheel")


if __name__ == "__main__":
    main()
