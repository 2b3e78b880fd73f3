"""Runs the ranks of a Phalanx job as plain processes and does the operator's part: a rank that
exits non-zero is started again as its next incarnation, and a rank the coordinator declared
failed while its process is still there (hung: SIGSTOP) is SIGKILLed first. Rank programs print
``EVENT t_ms=... task=N inc=I kind=K key=value ...`` lines on stdout (the examples do); the
supervisor keeps them for the caller to wait on.

Used by the torch oracle test and the torch benchmark; not a product API.
"""

import os
import signal
import subprocess
import sys
import threading
import time

import harness


def parse_event(line):
    """``EVENT t_ms=1 task=0 kind=step step=3`` → {"t_ms": "1", "task": "0", ...} or None."""
    if not line.startswith("EVENT "):
        return None
    fields = {}
    for part in line[6:].split():
        key, _, value = part.partition("=")
        fields[key] = value
    return fields


class RankSupervisor:
    """``num`` ranks of ``argv`` (a Python script and its arguments) against ``coordinator``
    (a :class:`harness.Coordinator`); ``env`` adds to every rank's environment, and
    ``env_for(task, incarnation)`` (a dict) to one process's. ``kill_hung=False``: never kill a
    rank the coordinator declared failed (one that reported its own failure exits by itself).
    ``standby=True``: keep one warm standby (``phalanx.standby``: torch imported) and make a
    replacement of it, as ``phalanx-launch`` does in a pod. ``spare=True``: start one spare
    process as a spare pod's (spec.spares): it waits in ``phalanx.init()`` and the coordinator
    hands it the first rank that dies; that rank is not restarted here."""

    def __init__(self, coordinator, argv, num, env=None, log_dir=None, python=sys.executable,
                 env_for=None, kill_hung=True, standby=False, restart_delay=0.0, spare=False):
        self.coordinator = coordinator
        self.argv = list(argv)
        self.num = num
        self.env = dict(env or {})
        self.env_for = env_for
        self.kill_hung = kill_hung
        self.python = python
        self.log_dir = log_dir or coordinator.dir
        self.cond = threading.Condition()
        self.events = []      # parsed events, in arrival order
        self.exits = []       # (task, incarnation, returncode)
        self.procs = {}       # task -> (incarnation, Popen)
        self.restart_enabled = True
        self._closed = False
        self.use_standby = standby
        self.restart_delay = restart_delay  # seconds before a dead rank's replacement starts
        self.standby = None
        self.spare_waiting = False  # a spare process started and not yet given a task
        for task in range(num):
            self._start(task, 0)
        if standby:
            self._start_standby()
        if spare:
            self._start_spare()

    def _start_spare(self):
        env = self._common_env()
        env.update(self.coordinator.spare_env())
        log = open(os.path.join(self.log_dir, "spare.log"), "wb")
        proc = subprocess.Popen([self.python] + self.argv, env=env, stdout=subprocess.PIPE,
                                stderr=log)
        log.close()
        self.spare_waiting = True
        threading.Thread(target=self._watch, args=(None, None, proc), daemon=True).start()

    def _common_env(self):
        env = dict(os.environ)
        env.update(harness.package_env())
        env.update({"GLOO_SOCKET_IFNAME": "lo", "OMP_NUM_THREADS": "1"})
        env.update(self.env)
        return env

    def _start_standby(self):
        from phalanx import standby as standby_mod
        log = open(os.path.join(self.log_dir, "standby-%d.log" % time.monotonic_ns()), "wb")
        ready = standby_mod.Standby.start([self.python] + self.argv, self._common_env(),
                                          stdout=subprocess.PIPE, stderr=log)
        log.close()
        with self.cond:
            if self._closed:
                ready.retire()
            else:
                self.standby = ready

    def _start(self, task, incarnation):
        env = self._common_env()
        env.update(self.coordinator.env(task, incarnation))
        if self.env_for is not None:
            env.update(self.env_for(task, incarnation))
        proc = None
        with self.cond:
            ready, self.standby = self.standby, None
        if ready is not None:
            proc = ready.become(env)
            if not self._closed:
                # The next standby (used, or dead while waiting), once this replacement has had
                # the CPU to itself for a while.
                later = threading.Timer(2.0, self._start_standby)
                later.daemon = True
                later.start()
        if proc is None:
            log = open(os.path.join(self.log_dir, "rank-%d-%d.log" % (task, incarnation)), "wb")
            proc = subprocess.Popen([self.python] + self.argv, env=env, stdout=subprocess.PIPE,
                                    stderr=log)
            log.close()
        with self.cond:
            self.procs[task] = (incarnation, proc)
        threading.Thread(target=self._watch, args=(task, incarnation, proc), daemon=True).start()

    def _watch(self, task, incarnation, proc):
        for raw in proc.stdout:
            fields = parse_event(raw.decode("utf-8", "replace").strip())
            if fields is None:
                continue
            with self.cond:
                if task is None and "task" in fields:
                    # The spare was given a task: it is that task's process from now on.
                    task, incarnation = int(fields["task"]), int(fields["inc"])
                    self.procs[task] = (incarnation, proc)
                    self.spare_waiting = False
                self.events.append(fields)
                self.cond.notify_all()
            if (self.kill_hung and fields.get("kind") == "peer_change"
                    and fields.get("state") == "FAILED"):
                self._kill_if_hung(int(fields["peer"]), int(fields["peer_inc"]))
        code = proc.wait()
        proc.stdout.close()
        with self.cond:
            self.exits.append((task, incarnation, code))
            self.cond.notify_all()
            # A waiting spare takes a dead rank over (the coordinator hands it the task).
            restart = (code != 0 and self.restart_enabled and not self._closed
                       and self.procs.get(task, (None,))[0] == incarnation
                       and not self.spare_waiting)
        if restart:
            if self.restart_delay > 0:
                time.sleep(self.restart_delay)  # this rank's watcher thread: nothing else waits
                with self.cond:
                    if self._closed:
                        return
            self._start(task, incarnation + 1)

    def _kill_if_hung(self, task, incarnation):
        with self.cond:
            current = self.procs.get(task)
        if current and current[0] == incarnation and current[1].poll() is None:
            current[1].kill()  # the operator deletes the pod of a task declared failed

    def signal(self, task, sig):
        """Sends ``sig`` to the current process of ``task``; returns its incarnation."""
        with self.cond:
            incarnation, proc = self.procs[task]
        proc.send_signal(sig)
        return incarnation

    def wait_for(self, predicate, timeout):
        """Waits until ``predicate(events, exits)`` is truthy (bounded); returns its value."""
        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                value = predicate(self.events, self.exits)
                remaining = deadline - time.monotonic()
                if value or remaining <= 0:
                    return value
                self.cond.wait(min(remaining, 1.0))

    def latest(self, kind, task=None):
        """The newest event of ``kind`` (of ``task``), or None."""
        with self.cond:
            for fields in reversed(self.events):
                if fields.get("kind") == kind and (task is None or fields.get("task") == str(task)):
                    return fields
        return None

    def min_step(self):
        """The lowest step every rank has reported (0 before each has reported one)."""
        with self.cond:
            best = {}
            for fields in self.events:
                if fields.get("kind") == "step":
                    best[fields["task"]] = max(best.get(fields["task"], 0), int(fields["step"]))
        return min(best.values()) if len(best) == self.num else 0

    def finals(self):
        with self.cond:
            return {int(f["task"]): f for f in self.events if f.get("kind") == "final"}

    def close(self):
        with self.cond:
            self._closed = True
            procs = [p for _, p in self.procs.values()]
            ready, self.standby = self.standby, None
        if ready is not None:
            ready.retire()
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGCONT)
                proc.kill()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                pass
