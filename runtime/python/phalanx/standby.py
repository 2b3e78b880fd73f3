"""Warm standbys: a Python process started ahead of need, with torch already imported, that
becomes a rank when one dies (issue 35). Most of a replacement rank's start is ``import torch``
(about 1.2 s of the 1.3 s a cold restart takes to step again on this project's benchmark
machine); a standby has paid it before the failure.

    standby = Standby.start([sys.executable, "train.py", "--lr=0.1"], env)   # ahead of need
    proc = standby.become(rank_env)      # the rank: a subprocess.Popen, its pid the standby's

A standby runs ``python -c BOOT``: it imports torch (when the interpreter has it) and phalanx,
then waits for one line on its stdin naming the rank's environment. It then replaces its
environment with that one (``os.environ``; what torch read at import was the pod's common
environment, the same for every rank), points ``sys.argv`` at the command and runs it as
``__main__`` (``runpy``: a script path, or ``-m module``), as ``python script args`` would: its
exit status is the script's. Where it differs from a cold start: stdin is ``/dev/null`` (the
launcher's ranks get no input anyway), output is unbuffered (``PYTHONUNBUFFERED``), and
``sys.path[0]`` is the script's absolute folder. A standby whose stdin closes before it was
used exits 0.

Only Python commands can wait warm (``is_python_command``); anything else starts cold. The
user's own module is not imported ahead: importing it may have side effects (it is not known to
be free of them).
"""

import json
import os
import subprocess
import sys

# What the standby does before it is told to become a rank. Kept small and self-contained: it
# runs in the user's interpreter, which may not be this one.
BOOT = r"""
import json, os, runpy, sys
try:
    import torch  # noqa: F401  (the point of the standby)
    import torch.distributed  # noqa: F401
except ImportError:
    pass
try:
    import phalanx  # noqa: F401
    import phalanx.torch_recovery  # noqa: F401  (imports nothing of the user's)
    import phalanx.torch_store  # noqa: F401
    phalanx._native.load()  # the client library (gRPC and all): loaded on first use otherwise
except Exception:  # noqa: BLE001  (a standby without these is still a warm interpreter)
    pass
line = sys.stdin.readline()
if not line:
    sys.exit(0)
order = json.loads(line)
null = os.open(os.devnull, os.O_RDONLY)
os.dup2(null, 0)
os.close(null)
os.environ.clear()
os.environ.update(order["env"])
argv = order["argv"]
if argv[0] == "-m":
    sys.argv = argv[1:]
    runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
else:
    sys.argv = argv
    sys.path[0] = os.path.dirname(os.path.abspath(argv[0]))
    runpy.run_path(argv[0], run_name="__main__")
"""


def _after_interpreter_flags(command):
    """``command`` past the interpreter and its leading ``-u`` flags (the standby's streams are
    unbuffered already); a ``-u`` among the script's own arguments stays."""
    rest = list(command[1:])
    while rest and rest[0] == "-u":
        rest.pop(0)
    return rest


def is_python_command(command):
    """Whether ``command`` is ``PYTHON [-u] script ...`` or ``PYTHON [-u] -m module ...``: the
    forms a standby can run (it is itself a Python interpreter)."""
    if len(command) < 2 or not os.path.basename(command[0]).startswith("python"):
        return False
    rest = _after_interpreter_flags(command)
    return bool(rest) and (rest[0] == "-m" and len(rest) > 1 or not rest[0].startswith("-"))


def script_argv(command):
    """What a standby runs for a Python command: ``[script, args...]`` or ``["-m", module,
    args...]``."""
    return _after_interpreter_flags(command)


class Standby:
    """One standby process. ``start`` returns at once; the imports go on in the background."""

    def __init__(self, proc, command):
        self.proc = proc
        self.command = list(command)

    @classmethod
    def start(cls, command, env, **popen_kwargs):
        """A standby for the Python command ``command`` (``is_python_command``), in ``env`` (the
        environment every rank shares). ``popen_kwargs`` go to ``subprocess.Popen`` (stdout,
        stderr, preexec_fn, ...)."""
        if not is_python_command(command):
            raise ValueError("a standby runs Python commands only, not %r" % (command,))
        env = dict(env, PYTHONUNBUFFERED="1")
        proc = subprocess.Popen([command[0], "-c", BOOT], env=env, stdin=subprocess.PIPE,
                                **popen_kwargs)
        return cls(proc, command)

    def alive(self):
        return self.proc.poll() is None

    def become(self, env):
        """Hands the standby the rank's environment: from now on it is the rank. Returns its
        ``Popen``; None when the standby has died meanwhile (start the rank cold)."""
        if not self.alive():
            return None
        order = json.dumps({"env": dict(env), "argv": script_argv(self.command)}) + "\n"
        try:
            self.proc.stdin.write(order.encode("utf-8"))
            self.proc.stdin.close()
        except (BrokenPipeError, OSError):
            return None
        return self.proc

    def retire(self):
        """Ends an unused standby at once (it holds nothing: it never became a rank)."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            try:
                self.proc.stdin.close()
            except OSError:
                pass
