"""A coordinator that stops or restarts never fails a Python task (issue 13): the real
phalanx-coordinator process is stopped with SIGTERM (as a pod eviction does) and a new one
started on the same address, under a Client in this process and under the JAX-style example."""

import os
import subprocess
import sys
import tempfile
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

import phalanx  # noqa: E402

TIMEOUT = 60.0  # generous for a loaded machine; nothing here asserts a speed
EXAMPLE = os.path.join(harness.PYTHON_DIR, "examples", "jax_style_train.py")


class CoordinatorRestartTest(unittest.TestCase):
    def setUp(self):
        self.coordinator = harness.Coordinator(num_tasks=2)
        self.clients = []

    def tearDown(self):
        for c in self.clients:
            c.close()
        self.coordinator.close()

    def client(self, task_id):
        c = phalanx.Client(self.coordinator.address, self.coordinator.job, task_id, 2,
                           token=self.coordinator.token)
        self.clients.append(c)
        return c

    def test_a_barrier_in_flight_raises_unavailable_then_the_retry_passes(self):
        c0, c1 = self.client(0), self.client(1)
        restarts = []
        c0.on_reconnect(restarts.append)
        c0.connect(TIMEOUT)
        c1.connect(TIMEOUT)
        outcome = {}

        def wait_in_barrier():
            try:
                c0.barrier("step-3", timeout=600)  # task 1 never comes: in flight until the stop
                outcome["error"] = None
            except phalanx.Error as e:
                outcome["error"] = e

        waiter = threading.Thread(target=wait_in_barrier, daemon=True)
        waiter.start()
        time.sleep(0.5)  # lets the call reach the coordinator; the outcome does not depend on it
        self.assertNotIn("error", outcome)
        self.coordinator.restart(downtime=0.5)
        waiter.join(TIMEOUT)
        self.assertFalse(waiter.is_alive(), "the barrier waited past the coordinator's exit")
        # Before: Cancelled ("coordinator is shutting down"), which the examples took as fatal.
        self.assertIsInstance(outcome["error"], phalanx.Unavailable)
        c0.wait_until_connected(TIMEOUT)
        c1.wait_until_connected(TIMEOUT)
        self.assertTrue(harness.eventually(lambda: restarts == [True], TIMEOUT), restarts)
        self.assertTrue(c0.connected)
        # The same task and incarnation re-registered with the new coordinator: the retry passes.
        t = threading.Thread(target=lambda: c1.barrier("step-3", timeout=TIMEOUT), daemon=True)
        t.start()
        c0.barrier("step-3", timeout=TIMEOUT)
        t.join(TIMEOUT)

    def test_jax_style_example_survives_a_sigterm_and_restart_mid_training(self):
        env = {k: v for k, v in os.environ.items() if not k.startswith("PHALANX_")}
        env.update(PHALANX_LIBRARY=harness.LIBRARY, PYTHONPATH=harness.PYTHON_DIR)
        with tempfile.TemporaryDirectory() as ckpt:
            procs, logs = [], []
            for task in range(2):
                task_env = dict(env, **self.coordinator.env(task))
                procs.append(subprocess.Popen(
                    [sys.executable, "-u", EXAMPLE, "--steps=60", "--step_time=0.02",
                     "--checkpoint_every=5", "--checkpoint_dir=" + ckpt],
                    env=task_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT))
                logs.append([])
            try:
                for task, proc in enumerate(procs):
                    line = harness.read_line(proc, "EVENT", TIMEOUT, logs[task])
                    while line is not None and not ("kind=checkpoint step=10" in line):
                        logs[task].append(line)
                        line = harness.read_line(proc, "EVENT", TIMEOUT, logs[task])
                    self.assertIsNotNone(line, "task %d never reached step 10:\n%s" % (
                        task, "\n".join(logs[task])))
                self.coordinator.restart(downtime=1.0)
                for task, proc in enumerate(procs):
                    out, _ = proc.communicate(timeout=120)
                    text = "\n".join(logs[task]) + "\n" + out.decode("utf-8", "replace")
                    self.assertEqual(proc.returncode, 0, text)
                    self.assertIn("kind=reconnected coordinator_restarted=1", text)
                    self.assertIn("kind=done steps=60", text)
            finally:
                for proc in procs:
                    harness.stop(proc)

    def quick_start(self, work, task, incarnation=0):
        """The loop users copy from docs/python.md, run as written with stand-ins for the
        training functions, as ``task``."""
        with open(os.path.join(harness.REPO, "docs", "python.md")) as f:
            doc = f.read()
        loop = doc.split("## Quick start", 1)[1].split("```python\n", 1)[1].split("```")[0]
        stand_ins = ("import sys, time\nsteps = 40\n"
                     "def newest_checkpoint(): return 0\n"
                     "def save_checkpoint(step): pass\n"
                     "def load_checkpoint(step): pass\n"
                     "def train_step(step):\n"
                     "    time.sleep(0.02)\n"
                     "    print('STEP %d' % step, flush=True)\n")
        script = os.path.join(work, "quick_start.py")
        with open(script, "w") as f:
            f.write(stand_ins + loop + "print('DONE', flush=True)\n")
        env = {k: v for k, v in os.environ.items() if not k.startswith("PHALANX_")}
        env.update(PHALANX_LIBRARY=harness.LIBRARY, PYTHONPATH=harness.PYTHON_DIR)
        return subprocess.Popen([sys.executable, "-u", script],
                                env=dict(env, **self.coordinator.env(task, incarnation)),
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT)

    def finish_all(self, procs):
        for proc in procs:
            out, _ = proc.communicate(timeout=120)  # its barriers' timeout is 300 s
            self.assertEqual(proc.returncode, 0, out)
            self.assertIn(b"DONE", out)

    def test_the_quick_start_loop_in_docs_python_md_survives_a_restart(self):
        with tempfile.TemporaryDirectory() as work:
            procs = [self.quick_start(work, task) for task in range(2)]
            try:
                for proc in procs:
                    self.assertIsNotNone(harness.read_line(proc, "STEP 10", TIMEOUT))
                self.coordinator.restart(downtime=1.0)
                self.finish_all(procs)
            finally:
                for proc in procs:
                    harness.stop(proc)

    def test_the_quick_start_loop_goes_straight_to_recovery_when_a_peer_is_killed(self):
        # Fail fast: the survivor's step barrier ends when the peer dies (its 300 s timeout
        # would outlast the 120 s this test waits), it agrees with the replacement and finishes.
        with tempfile.TemporaryDirectory() as work:
            procs = [self.quick_start(work, task) for task in range(2)]
            try:
                for proc in procs:
                    self.assertIsNotNone(harness.read_line(proc, "STEP 10", TIMEOUT))
                procs[1].kill()
                procs[1].wait(10)
                procs[1].stdout.close()
                procs[1] = self.quick_start(work, 1, incarnation=1)  # what the operator does
                self.finish_all(procs)
            finally:
                for proc in procs:
                    harness.stop(proc)


if __name__ == "__main__":
    unittest.main()
