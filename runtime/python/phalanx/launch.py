"""The in-pod launcher: several ranks per pod, each its own Phalanx task (``nprocPerNode``).

    phalanx-launch [--nproc_per_node N] [--fatal_exit_codes 2] [--] COMMAND [ARG...]
    python3 -m phalanx.launch ...                # the same, without the console script

A TrainingJob with ``nprocPerNode: N`` gives each pod the environment of its first task
(``PHALANX_TASK_ID`` = pod index × N, ``PHALANX_NPROC_PER_NODE`` = N, one credential file per
local task). The launcher starts N copies of COMMAND, local rank ``l`` as task ``first + l``
with the variables torch and JAX expect: ``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``,
``LOCAL_WORLD_SIZE``, ``GROUP_RANK``, ``JAX_PROCESS_ID``, and its own ``PHALANX_TASK_ID``,
``PHALANX_TOKEN_FILE`` and ``PHALANX_INCARNATION``.

A rank that dies (any non-zero exit or signal other than those below) is restarted in place as
its task's next incarnation; the survivors keep running (with ``phalanx.torch_recovery`` they
re-form the group with it, no step lost). The coordinator incarnation of the r-th restart of a
rank in a pod at incarnation I is ``I * LOCAL_INCARNATION_STRIDE + r``: above every process of
the pod before, below every process of the next pod (the operator's
``kLocalIncarnationStride``). The pod ends only when:

- every rank exited 0 (exit 0);
- a rank exited with a fatal code (``--fatal_exit_codes``, default 2: bad configuration): the
  others are stopped and the pod exits with that code, for the job's failure policy;
- ranks exited 4 (checkpointed and left a preempted node): not restarted; once every rank has
  ended the pod exits 4;
- a rank exited 5 (the node agent saw its GPU fail; ``phalanx.torch_recovery``): a restart in
  place would land on the same GPU, so the others are stopped and the pod exits 5, to be started
  again elsewhere (its healthy ranks move with it: ``nprocPerNode: 1`` moves only the task);
- the launcher got SIGTERM or SIGINT (the pod is being deleted): forwarded to every rank;
- a rank was restarted ``LOCAL_INCARNATION_STRIDE - 1`` times in this pod.

A rank that keeps dying right after its start is restarted after a growing pause (up to 30 s).
With N = 1 the launcher simply becomes COMMAND (exec): the operator restarts the pod.

Warm standby (``--standby``, the default for a Python COMMAND): the launcher keeps one spare
Python process with torch already imported (``phalanx.standby``); a dead rank's replacement is
that process, told the rank's environment, so it skips the interpreter's start and ``import
torch`` (most of a restart). A new standby is started a little later (``STANDBY_DELAY_S``, so
that it does not compete with the recovering ranks for the CPU). ``--no_standby`` turns it off;
it costs one idle interpreter with torch loaded per pod.
"""

import argparse
import ctypes
import os
import queue
import signal
import subprocess
import sys
import threading
import time

try:
    from phalanx import standby as standby_mod
except ImportError:  # run as a file, not as part of the package
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from phalanx import standby as standby_mod

LOCAL_INCARNATION_STRIDE = 1000  # operator/controller/desired_state.h kLocalIncarnationStride
EXIT_PREEMPTED = 4               # phalanx.torch_recovery.EXIT_PREEMPTED
EXIT_DEVICE_FAILED = 5           # phalanx.torch_recovery.EXIT_DEVICE_FAILED
QUICK_FAILURE_S = 10.0           # a rank that dies sooner than this after its start
MAX_PAUSE_S = 30.0
STANDBY_DELAY_S = 2.0            # after a standby became a rank, before the next one starts


def log(message):
    print("phalanx-launch: " + message, file=sys.stderr, flush=True)


def describe(code):
    if code < 0:
        try:
            return "signal %s" % signal.Signals(-code).name
        except ValueError:
            return "signal %d" % -code
    return "exit code %d" % code


def parse_args(argv):
    parser = argparse.ArgumentParser(
        prog="phalanx-launch", description="Runs nprocPerNode local ranks of a Phalanx job, each "
        "its own task, and restarts a dead one in place as its next incarnation.")
    parser.add_argument("--nproc_per_node", type=int, default=None,
                        help="local ranks (default: $PHALANX_NPROC_PER_NODE, else 1)")
    parser.add_argument("--fatal_exit_codes", default="2",
                        help="comma-separated exit codes that end the pod instead of a restart "
                             "(default 2: bad configuration)")
    parser.add_argument("--standby", dest="standby", action="store_true", default=None,
                        help="keep a warm standby (torch imported) to replace a dead rank "
                             "(default for a Python command)")
    parser.add_argument("--no_standby", dest="standby", action="store_false",
                        help="start every replacement cold")
    parser.add_argument("--standby_delay", type=float, default=STANDBY_DELAY_S,
                        help="seconds after the ranks' start, or after a standby became a rank, "
                             "before a (new) standby is started (default %(default)s)")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="the rank's command line")
    args = parser.parse_args(argv)
    if args.command and args.command[0] == "--":
        args.command = args.command[1:]
    if not args.command:
        parser.error("no command given (e.g. phalanx-launch python3 train.py)")
    try:
        args.fatal = {int(c) for c in args.fatal_exit_codes.split(",") if c.strip()}
    except ValueError:
        parser.error("--fatal_exit_codes: not a list of integers: %r" % args.fatal_exit_codes)
    return args


def int_env(name, env, default=None):
    value = env.get(name)
    if value is None or value == "":
        if default is None:
            raise SystemExit("phalanx-launch: %s is not set (the operator sets it in pods of a "
                             "TrainingJob; for a local run set it by hand)" % name)
        return default
    try:
        return int(value)
    except ValueError:
        raise SystemExit("phalanx-launch: %s=%r is not an integer" % (name, value))


class Layout:
    """Where this pod's ranks sit in the job, from the pod's environment."""

    def __init__(self, env, nproc):
        self.nproc = nproc
        self.first = int_env("PHALANX_TASK_ID", env)
        self.num_tasks = int_env("PHALANX_NUM_TASKS", env)
        self.pod_incarnation = int_env("PHALANX_INCARNATION", env, 0)
        if self.first % nproc != 0 or self.first + nproc > self.num_tasks:
            raise SystemExit("phalanx-launch: PHALANX_TASK_ID=%d with %d ranks per pod does not "
                             "fit a job of %d tasks" % (self.first, nproc, self.num_tasks))
        self.token_dir = None
        if env.get("PHALANX_TOKEN_FILE"):
            self.token_dir = os.path.dirname(env["PHALANX_TOKEN_FILE"])
        self.ticket_dir = None
        if env.get("PHALANX_CLIQUE_TICKET_FILE"):
            self.ticket_dir = os.path.dirname(env["PHALANX_CLIQUE_TICKET_FILE"])

    def rank_env(self, base, local, restarts):
        task = self.first + local
        env = dict(base)
        env.update({
            "PHALANX_TASK_ID": str(task),
            "PHALANX_INCARNATION": str(self.pod_incarnation * LOCAL_INCARNATION_STRIDE + restarts),
            "RANK": str(task),
            "LOCAL_RANK": str(local),
            "WORLD_SIZE": str(self.num_tasks),
            "LOCAL_WORLD_SIZE": str(self.nproc),
            "GROUP_RANK": str(self.first // self.nproc),
            "JAX_PROCESS_ID": str(task),
        })
        if self.token_dir is not None:
            # The operator mounts one file per local task: token-<task> (desired_state.h).
            env["PHALANX_TOKEN_FILE"] = os.path.join(self.token_dir, "token-%d" % task)
        if self.ticket_dir is not None:
            # And one clique ticket per local task: ticket-<task> (desired_state.h).
            env["PHALANX_CLIQUE_TICKET_FILE"] = os.path.join(self.ticket_dir, "ticket-%d" % task)
        return env


def _die_with_parent():
    """In the child before exec: SIGKILL when the launcher dies, so no rank outlives its pod's
    supervisor (Linux prctl PR_SET_PDEATHSIG)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        pass


class Launcher:
    def __init__(self, args, env):
        self.args = args
        self.base_env = env
        self.layout = Layout(env, args.nproc)
        self.exits = queue.Queue()  # (local, Popen, returncode) from the waiter threads
        self.procs = {}             # local -> (Popen, started at)
        self.restarts = [0] * args.nproc
        self.quick_failures = [0] * args.nproc
        self.pending = {}           # local -> monotonic time of its delayed restart
        self.outcome = {}           # local -> final exit code (ranks not to be restarted)
        self.stopping = None        # the exit code the pod ends with, once it ends
        warm = args.standby if args.standby is not None else True
        self.use_standby = warm and standby_mod.is_python_command(args.command)
        self.standby = None         # the warm standby, once started
        self.standby_due = None     # monotonic time to start the next one

    def start_standby(self):
        self.standby_due = None
        try:
            self.standby = standby_mod.Standby.start(self.args.command, self.base_env,
                                                     preexec_fn=_die_with_parent)
        except OSError as e:
            log("no warm standby (%s): replacements start cold" % e)
            self.use_standby = False

    def start(self, local):
        env = self.layout.rank_env(self.base_env, local, self.restarts[local])
        proc, how = None, ""
        if self.standby is not None:
            proc = self.standby.become(env)
            self.standby = None
            if proc is not None:
                how = " (the warm standby)"
            # A new standby either way (one that died while waiting is replaced too).
            self.standby_due = time.monotonic() + self.args.standby_delay
        if proc is None:
            try:
                proc = subprocess.Popen(self.args.command, env=env, preexec_fn=_die_with_parent)
            except OSError as e:
                log("cannot run %s: %s" % (self.args.command[0], e))
                self.stop_all(signal.SIGTERM, 127)
                return
        self.procs[local] = (proc, time.monotonic())
        log("local rank %d: task %s, incarnation %s, pid %d%s" % (
            local, env["PHALANX_TASK_ID"], env["PHALANX_INCARNATION"], proc.pid, how))
        threading.Thread(target=self._wait, args=(local, proc), daemon=True).start()

    def _wait(self, local, proc):
        self.exits.put((local, proc, proc.wait()))

    def stop_all(self, sig, code):
        """Ends the pod with `code` once every rank has exited; `sig` goes to those running."""
        if self.stopping is None:
            self.stopping = code
        self.pending.clear()
        self.standby_due = None
        if self.standby is not None:
            self.standby.retire()
            self.standby = None
        for proc, _ in self.procs.values():
            if proc.poll() is None:
                try:
                    proc.send_signal(sig)
                except ProcessLookupError:
                    pass

    def on_signal(self, signum, _frame):
        log("%s: stopping every local rank" % signal.Signals(signum).name)
        self.stop_all(signum, 128 + signum)

    def on_exit(self, local, proc, code):
        if self.procs.get(local, (None,))[0] is not proc:
            return
        started = self.procs.pop(local)[1]
        task = self.layout.first + local
        if self.stopping is not None:
            return
        if code == 0:
            self.outcome[local] = 0
            log("local rank %d (task %d) finished" % (local, task))
        elif code in self.args.fatal:
            log("local rank %d (task %d) ended with fatal %s: stopping the pod" % (
                local, task, describe(code)))
            self.stop_all(signal.SIGTERM, code)
        elif code == EXIT_DEVICE_FAILED:
            log("local rank %d (task %d) left a failed GPU (exit code 5): stopping the pod so "
                "that it starts elsewhere" % (local, task))
            self.stop_all(signal.SIGTERM, code)
        elif code == EXIT_PREEMPTED:
            self.outcome[local] = code
            log("local rank %d (task %d) left for a preemption (exit code 4)" % (local, task))
        elif self.restarts[local] + 1 >= LOCAL_INCARNATION_STRIDE:
            log("local rank %d (task %d) ended with %s after %d restarts in this pod: ending "
                "the pod" % (local, task, describe(code), self.restarts[local]))
            self.stop_all(signal.SIGTERM, code if code > 0 else 128 - code)
        else:
            self.restarts[local] += 1
            quick = time.monotonic() - started < QUICK_FAILURE_S
            self.quick_failures[local] = self.quick_failures[local] + 1 if quick else 0
            pause = 0.0
            if self.quick_failures[local] > 1:
                pause = min(MAX_PAUSE_S, 0.5 * 2 ** (self.quick_failures[local] - 2))
            log("local rank %d (task %d) ended with %s: restarting it in place as incarnation "
                "%d%s" % (local, task, describe(code),
                          self.layout.pod_incarnation * LOCAL_INCARNATION_STRIDE +
                          self.restarts[local], " in %.1f s" % pause if pause else ""))
            self.pending[local] = time.monotonic() + pause

    def run(self):
        signal.signal(signal.SIGTERM, self.on_signal)
        signal.signal(signal.SIGINT, self.on_signal)
        for local in range(self.args.nproc):
            self.start(local)
        if self.use_standby and self.stopping is None:
            self.standby_due = time.monotonic() + self.args.standby_delay
        while self.procs or self.pending:
            now = time.monotonic()
            for local, due in sorted(self.pending.items()):
                if due <= now:
                    del self.pending[local]
                    self.start(local)
            if self.stopping is not None:
                self.standby_due = None  # a stopping pod needs none (and must not spin on it)
            if self.standby_due is not None and self.standby_due <= now:
                self.start_standby()
            dues = list(self.pending.values()) + (
                [self.standby_due] if self.standby_due is not None else [])
            timeout = max(0.0, min(dues) - time.monotonic()) if dues else None
            try:
                local, proc, code = self.exits.get(timeout=timeout)
            except queue.Empty:
                continue
            self.on_exit(local, proc, code)
        if self.standby is not None:
            self.standby.retire()
            self.standby = None
        if self.stopping is not None:
            return self.stopping
        codes = set(self.outcome.values())
        return EXIT_PREEMPTED if EXIT_PREEMPTED in codes else 0


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    env = dict(os.environ)
    nproc = args.nproc_per_node or int_env("PHALANX_NPROC_PER_NODE", env, 1)
    if nproc < 1:
        raise SystemExit("phalanx-launch: --nproc_per_node must be at least 1, got %d" % nproc)
    args.nproc = nproc
    if nproc == 1:
        # One rank: nothing to supervise (the operator restarts the pod); become the command.
        os.environ.setdefault("LOCAL_RANK", "0")
        os.environ.setdefault("LOCAL_WORLD_SIZE", "1")
        try:
            os.execvp(args.command[0], args.command)
        except OSError as e:
            raise SystemExit("phalanx-launch: cannot run %s: %s" % (args.command[0], e))
    return Launcher(args, env).run()


if __name__ == "__main__":
    sys.exit(main())
