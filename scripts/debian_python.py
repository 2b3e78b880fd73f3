"""Debian's python3 packages (python3-matplotlib, python3-yaml) belong to Debian's interpreter;
another python3 (a pyenv one) may come first on PATH. `reexec_for(module)`: when `module` cannot
be imported here and /usr/bin/python3 is another interpreter, the running script starts again
under it (same arguments); else returns False so the caller can say what is missing."""
import importlib
import os
import sys

DEBIAN_PYTHON = "/usr/bin/python3"


def reexec_for(module):
    try:
        importlib.import_module(module)
        return True
    except ImportError:
        pass
    if sys.executable != DEBIAN_PYTHON and os.access(DEBIAN_PYTHON, os.X_OK):
        os.execv(DEBIAN_PYTHON, [DEBIAN_PYTHON, os.path.abspath(sys.argv[0]), *sys.argv[1:]])
    return False
