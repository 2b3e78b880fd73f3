"""The wheel as a user gets it (issue 18): scripts/build_wheel.py builds it from the build tree,
pip installs it into a fresh venv (torch from the system site packages, as in an image that has
torch already) under DIR (``--install DIR``), with a copy of the tests and examples but no source
package beside them. Checked here on the installed library: `import phalanx` loads it from the
venv, every dependency resolves into the bundle or to the base system (ldd), it exports the C ABI
only (nm -D), and the console scripts and torchrun's entry point are installed.

This is CTest's fixture ``phalanx_wheel`` (PythonClient.Wheel): the torch tests that require it
then run once, from this installed package (installed_test.py), with no build-tree library and
no LD_LIBRARY_PATH on any path. DIR/installed is written last, so only a complete install is used.

Exits 77 (CTest: skipped) with the reason when torch or patchelf is missing; the tests that
require the fixture then run from the source tree and say so."""

import os
import re
import argparse
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import harness  # noqa: E402

SYSTEM = ("linux-vdso.so.1", "ld-linux", "libc.so.6", "libm.so.6", "libgcc_s.so.1",
          "libstdc++.so.6", "libdl.so.2", "libpthread.so.0", "librt.so.1")


INSTALLED_MARKER = "installed"  # DIR/installed: "<venv python>\n<test tree>\n"


def installed_env():
    """The environment of a test run against the installed package: nothing pointing Python or
    the loader into the source or build tree; PHALANX_BUILD_DIR only locates the programs the
    tests start (phalanx-coordinator)."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PHALANX_LIBRARY", "LD_LIBRARY_PATH")}
    env.update(PHALANX_TEST_INSTALLED="1", PHALANX_BUILD_DIR=harness.BUILD)
    return env


def check(condition, message):
    if not condition:
        sys.exit("FAIL: " + message)


def run(argv, **kwargs):
    print("+ " + " ".join(argv), flush=True)
    return subprocess.run(argv, check=True, **kwargs)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--install", required=True, metavar="DIR",
                        help="where the venv and the copied tests go (emptied first)")
    tmp = parser.parse_args().install
    shutil.rmtree(tmp, ignore_errors=True)  # no stale install survives a failed or skipped run
    harness.require_torch()
    if shutil.which("patchelf") is None:
        print("SKIP: patchelf is not installed (scripts/install-deps.sh installs it)")
        sys.exit(77)
    os.makedirs(tmp)
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
    shutil.copytree(os.path.join(harness.PYTHON_DIR, "examples"), os.path.join(tree, "examples"))
    env = installed_env()

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
        # The venv lives under the build directory: only what resolves outside the bundle
        # must not come from the build tree.
        check(inside or harness.BUILD not in line, "resolved into the build tree: " + line)
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

    with open(os.path.join(tmp, INSTALLED_MARKER), "w") as f:
        f.write("%s\n%s\n" % (python, tree))
    print("PASS: the wheel installs into %s; the torch tests run from it (installed_test.py)" % venv)


if __name__ == "__main__":
    main()
