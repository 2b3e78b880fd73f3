"""Runs one unittest module (``installed_test.py --wheel DIR tests.test_torch_store``) against the
phalanx package the PythonClient.Wheel fixture installed under DIR (wheel_check.py), from its
copied test tree with nothing on any path pointing into the source or build tree: so the torch
tests check what a user gets, and run once.

Without a complete install (the fixture was skipped: no torch or no patchelf) it runs the module
from the source tree against the build tree's library, and says so. Exits with unittest's code."""

import argparse
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import wheel_check  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--wheel", required=True, metavar="DIR",
                        help="where PythonClient.Wheel installed the package")
    parser.add_argument("module", help="the unittest module, e.g. tests.test_torch_store")
    args = parser.parse_args()
    marker = os.path.join(args.wheel, wheel_check.INSTALLED_MARKER)
    if os.path.exists(marker):
        with open(marker) as f:
            python, tree = f.read().split("\n")[:2]
        print("running %s from the installed wheel: %s in %s" % (args.module, python, tree),
              flush=True)
        argv, cwd, env = [python], tree, wheel_check.installed_env()
    else:
        print("NOTE: no installed wheel under %s (PythonClient.Wheel was skipped: see its "
              "output); running %s from the source tree" % (args.wheel, args.module), flush=True)
        argv, cwd, env = [sys.executable], os.path.dirname(HERE), None
    sys.exit(subprocess.call(argv + ["-m", "unittest", "-v", args.module], cwd=cwd, env=env))


if __name__ == "__main__":
    main()
