"""Spares (spec.spares, ADR 0007) with real processes: a spare waits in phalanx.init() with a
spare credential; when a task's process dies (SIGKILL) the coordinator hands the spare that
task's next incarnation, and the spare's init() returns as that task. A task that ends its own
session (its script finished) is not taken over; a spare credential cannot act as a task."""

import os
import signal
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

harness.use_source_package()
import phalanx  # noqa: E402

TIMEOUT = 60.0  # generous for a loaded machine; nothing here asserts a speed

# Prints who it is once connected, then lives until told to end (stdin closes) or killed.
WORKER = r"""
import sys, phalanx
c = phalanx.init(timeout=60)
print("UP task=%d incarnation=%d" % (c.task_id, c.incarnation), flush=True)
sys.stdin.read()
"""


def spare_credential(token, slot):
    return harness.spare_credential(token, slot)


class SpareTest(unittest.TestCase):
    def setUp(self):
        self.coordinator = harness.Coordinator(num_tasks=2,
                                               extra_args=["--metrics_listen=127.0.0.1:0"])
        self.procs = []

    def tearDown(self):
        for p in self.procs:
            if p.stdin is not None and not p.stdin.closed:
                p.stdin.close()
            harness.stop(p)
        self.coordinator.close()

    def start(self, env):
        full = dict(os.environ, **harness.package_env())
        for name in ("PHALANX_TASK_ID", "PHALANX_INCARNATION", "PHALANX_SPARE", "RANK"):
            full.pop(name, None)
        full.update(env)
        p = subprocess.Popen([sys.executable, "-c", WORKER], env=full, stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        self.procs.append(p)
        return p

    def task(self, task_id, incarnation=0):
        p = self.start(self.coordinator.env(task_id, incarnation))
        log = []
        self.assertEqual(harness.read_line(p, "UP ", TIMEOUT, log),
                         "UP task=%d incarnation=%d" % (task_id, incarnation), log)
        return p

    def spare(self, slot, pod):
        env = self.coordinator.env(0)
        del env["PHALANX_TASK_ID"], env["PHALANX_INCARNATION"]
        env.update(PHALANX_SPARE=str(slot), PHALANX_POD_NAME=pod,
                   PHALANX_TOKEN=spare_credential(self.coordinator.token, slot))
        waiting = self.coordinator.metric("phalanx_coordinator_spares_waiting")
        p = self.start(env)
        # Waiting once the coordinator counts it (what the operator's spares' "ready" reads).
        self.assertTrue(harness.eventually(
            lambda: self.coordinator.metric("phalanx_coordinator_spares_waiting") > waiting,
            TIMEOUT), "the spare never started waiting")
        return p

    def test_a_killed_task_is_taken_over_by_the_waiting_spare(self):
        self.task(0)
        victim = self.task(1)
        spare = self.spare(0, "job-spare-0")
        victim.send_signal(signal.SIGKILL)
        victim.wait(TIMEOUT)
        log = []
        self.assertEqual(harness.read_line(spare, "UP ", TIMEOUT, log),
                         "UP task=1 incarnation=1", log)
        self.assertTrue(any("spare job-spare-0 takes over task 1 as incarnation 1" in line
                            for line in log), log)

    def test_a_task_that_ends_its_own_session_is_not_taken_over(self):
        self.task(0)
        finished = self.task(1)
        spare = self.spare(0, "job-spare-0")
        finished.stdin.close()  # its script ends: atexit closes the client
        self.assertEqual(finished.wait(TIMEOUT), 0)
        # Had the spare taken task 1, this registration of incarnation 1 would be refused as
        # stale or supersede it; instead the operator's replacement is task 1 (as it would be).
        self.task(1, incarnation=1)
        # The spare still waits: the next death is its.
        self.procs[0].send_signal(signal.SIGKILL)
        log = []
        self.assertEqual(harness.read_line(spare, "UP ", TIMEOUT, log),
                         "UP task=0 incarnation=1", log)

    def test_a_spare_credential_cannot_act_as_a_task(self):
        c = phalanx.Client(self.coordinator.address, self.coordinator.job, 0, 2,
                           token=spare_credential(self.coordinator.token, 0))
        self.addCleanup(c.close)
        with self.assertRaises((phalanx.PermissionDenied, phalanx.Unauthenticated)) as raised:
            c.connect(TIMEOUT)
        self.assertIn("spare", str(raised.exception))


if __name__ == "__main__":
    unittest.main()
