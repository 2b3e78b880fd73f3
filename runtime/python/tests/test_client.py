"""The phalanx Python package against a real phalanx-coordinator process: two clients in
threads of this process (the C client is thread-safe and releases the GIL while it waits)."""

import os
import subprocess
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402  (sets PHALANX_LIBRARY before phalanx loads it)

sys.path.insert(0, harness.PYTHON_DIR)
import phalanx  # noqa: E402


def in_thread(fn, *args):
    """Runs fn(*args) in a thread; returns a join() that yields its result or raises."""
    box = {}

    def run():
        try:
            box["value"] = fn(*args)
        except BaseException as e:  # re-raised in join
            box["error"] = e

    t = threading.Thread(target=run, daemon=True)
    t.start()

    def join(timeout=30):
        t.join(timeout)
        if t.is_alive():
            raise AssertionError("%s did not finish in %ss" % (fn, timeout))
        if "error" in box:
            raise box["error"]
        return box.get("value")
    return join


class ClientTest(unittest.TestCase):
    def setUp(self):
        self.coordinator = harness.Coordinator(num_tasks=2)
        self.clients = []
        self.saved_env = dict(os.environ)

    def tearDown(self):
        phalanx.close()
        for c in self.clients:
            c.close()
        os.environ.clear()
        os.environ.update(self.saved_env)
        self.coordinator.close()

    def client(self, task_id, incarnation=0, token=None, connect=True):
        env = self.coordinator.env(task_id, incarnation, token)
        c = phalanx.Client(env["PHALANX_COORDINATOR"], env["PHALANX_JOB"], task_id,
                           self.coordinator.num_tasks, incarnation, env["PHALANX_TOKEN"])
        self.clients.append(c)
        if connect:
            c.connect(timeout=20)
        return c

    def test_init_from_env_then_barrier_and_key_value_roundtrip(self):
        os.environ.update(self.coordinator.env(0))
        peers = []
        phalanx.on_peer_change(peers.append)  # before init: attached before connecting
        phalanx.init(timeout=20)
        self.assertEqual((phalanx.task_id(), phalanx.num_tasks(), phalanx.incarnation()), (0, 2, 0))
        other = self.client(1)

        join = in_thread(other.barrier, "start", 20)
        phalanx.barrier("start", timeout=20)
        join()

        phalanx.kv_set("cfg/lr", "0.1")
        phalanx.kv_set("cfg/batch", b"\x00\x01binary")
        self.assertEqual(other.kv_get("cfg/lr", timeout=5), b"0.1")
        self.assertEqual(other.kv_try_get("cfg/batch"), b"\x00\x01binary")
        self.assertIsNone(other.kv_try_get("cfg/nope"))
        self.assertEqual(sorted(phalanx.kv_dir("cfg")),
                         [("cfg/batch", b"\x00\x01binary"), ("cfg/lr", b"0.1")])
        with self.assertRaises(phalanx.AlreadyExists):
            other.kv_set("cfg/lr", "0.2")
        other.kv_set("cfg/lr", "0.2", overwrite=True)
        self.assertEqual(phalanx.kv_get("cfg/lr", 5), b"0.2")
        # A kv_get that waits sees a value set while it waits.
        join = in_thread(phalanx.kv_get, "late", 20)
        time.sleep(0.2)
        other.kv_set("late", "here")
        self.assertEqual(join(), b"here")
        self.assertEqual(phalanx.kv_delete("cfg/lr"), 1)
        self.assertIsNone(phalanx.kv_try_get("cfg/lr"))

        join = in_thread(other.alive_tasks)
        self.assertEqual(sorted(phalanx.alive_tasks(timeout=20)),
                         [phalanx.TaskRef(0, 0), phalanx.TaskRef(1, 0)])
        self.assertEqual(len(join()), 2)

    def test_kv_add_and_compare_set_count_and_elect(self):
        a, b = self.client(0), self.client(1)
        self.assertEqual(a.kv_add("arrived"), 1)
        self.assertEqual(b.kv_add("arrived", 2), 3)
        self.assertEqual(a.kv_get("arrived", timeout=5), b"3")  # a counter is decimal text
        a.kv_set("name", "w")
        with self.assertRaises(phalanx.FailedPrecondition):
            a.kv_add("name")
        self.assertEqual(a.kv_compare_set("leader", None, "task-0"), (True, b"task-0"))
        self.assertEqual(b.kv_compare_set("leader", None, "task-1"), (False, b"task-0"))
        self.assertEqual(b.kv_compare_set("leader", b"task-0", "task-1"), (True, b"task-1"))
        self.assertEqual(a.kv_compare_set("absent", "x", "y"), (False, None))
        a.kv_set("empty", b"")
        self.assertEqual(a.kv_compare_set("empty", b"", "full"), (True, b"full"))

    def test_kv_set_without_waiting_is_ordered_and_its_failure_is_not_lost(self):
        a, b = self.client(0), self.client(1)
        for i in range(200):  # each get follows its set on the same session
            a.kv_set("fast/%d" % i, b"v%d" % i, overwrite=True, wait=False)
            self.assertEqual(a.kv_get("fast/%d" % i, timeout=5), b"v%d" % i)
        a.kv_wait_sets(timeout=5)
        self.assertEqual(b.kv_get("fast/199", timeout=5), b"v199")
        # Refused without overwrite: the refusal comes back on the next unwaited set ...
        a.kv_set("fast/0", b"again", wait=False)
        with self.assertRaises(phalanx.AlreadyExists) as refused:
            a.kv_get("fast/0", timeout=5)  # answered after the set, so the answer is in
            a.kv_set("fast/other", b"x", wait=False)
        self.assertIn("earlier set sent without waiting", str(refused.exception))
        # ... or on kv_wait_sets, once.
        a.kv_set("fast/1", b"again", wait=False)
        with self.assertRaises(phalanx.AlreadyExists):
            a.kv_wait_sets(timeout=5)
        a.kv_wait_sets(timeout=5)
        self.assertEqual(b.kv_get("fast/0", timeout=5), b"v0")

    def test_kv_quota_and_paged_directory_through_a_real_coordinator(self):
        # A coordinator whose directory answers hold two 1000-byte entries and whose store
        # holds 12 keys: kv_dir still returns the whole directory (the C++ client pages), and
        # the 13th key is refused with the quota named.
        self.coordinator.close()
        self.coordinator = harness.Coordinator(num_tasks=2, extra_args=[
            "--kv_max_key_bytes=64", "--kv_max_value_bytes=1000", "--kv_dir_max_bytes=2100",
            "--kv_max_keys=12"])
        c = self.client(0)
        for i in range(12):
            c.kv_set("big/%02d" % i, bytes([65 + i]) * 1000)
        listed = c.kv_dir("big")
        self.assertEqual([k for k, _ in listed], ["big/%02d" % i for i in range(12)])
        self.assertEqual(listed[11][1], b"L" * 1000)
        with self.assertRaises(phalanx.ResourceExhausted) as refused:
            c.kv_set("big/12", "x")
        self.assertIn("12 of 12 keys (--kv_max_keys)", str(refused.exception))
        self.assertEqual(c.kv_delete("big"), 12)
        c.kv_set("big/12", "x")  # the quota came back with the delete

    def test_kv_get_timeout_raises_deadline_exceeded_naming_the_key(self):
        a = self.client(0)
        start = time.monotonic()
        with self.assertRaises(phalanx.DeadlineExceeded) as cm:
            a.kv_get("never/set", timeout=0.3)
        self.assertIn("never/set", str(cm.exception))
        self.assertLess(time.monotonic() - start, 10)
        self.assertIsInstance(cm.exception, phalanx.Error)

    def test_barrier_timeout_names_the_task_that_never_arrived(self):
        a = self.client(0)
        self.client(1)  # connected, but never enters the barrier
        with self.assertRaises(phalanx.DeadlineExceeded) as cm:
            a.barrier("lonely", timeout=0.5)
        self.assertEqual(cm.exception.missing_tasks, [1], str(cm.exception))
        self.assertIn("never arrived", str(cm.exception))

    def test_wrong_token_is_refused_with_a_clear_error(self):
        bad = self.client(0, token="not-the-token", connect=False)
        with self.assertRaises((phalanx.Unauthenticated, phalanx.PermissionDenied)) as cm:
            bad.connect(timeout=10)
        self.assertIn("token", str(cm.exception))

    def test_missing_environment_is_invalid_argument_naming_the_variable(self):
        for name in list(os.environ):
            if name.startswith("PHALANX_") and name != "PHALANX_LIBRARY":
                del os.environ[name]
        with self.assertRaises(phalanx.InvalidArgument) as cm:
            phalanx.init()
        self.assertIn("PHALANX_COORDINATOR", str(cm.exception))

    def test_an_incarnation_out_of_range_is_refused_before_ctypes_can_wrap_it(self):
        env = self.coordinator.env(0)
        for bad in (-1, phalanx.MAX_INCARNATION + 1, 1 << 64, True, "1", 1.0):
            with self.assertRaises(phalanx.InvalidArgument, msg=repr(bad)) as cm:
                phalanx.Client(env["PHALANX_COORDINATOR"], env["PHALANX_JOB"], 0, 2, bad,
                               env["PHALANX_TOKEN"])
            self.assertIn("incarnation", str(cm.exception))
        big = phalanx.Client(env["PHALANX_COORDINATOR"], env["PHALANX_JOB"], 0, 2,
                             phalanx.MAX_INCARNATION, env["PHALANX_TOKEN"])
        self.clients.append(big)
        self.assertEqual(big.incarnation, phalanx.MAX_INCARNATION)

    def test_a_forked_child_gets_a_clear_error_at_once_and_the_parent_keeps_its_session(self):
        c = self.client(0)
        c.kv_set("before-fork", b"1")
        read_end, write_end = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: report what a call on the parent's client does, then leave
            outcome = "no error"
            try:
                c.kv_set("from-child", b"x")
            except phalanx.FailedPrecondition as e:
                outcome = "FailedPrecondition: %s" % e
            except BaseException as e:  # noqa: BLE001 - reported to the parent
                outcome = "%s: %s" % (type(e).__name__, e)
            os.write(write_end, outcome.encode())
            os._exit(0)
        os.close(write_end)
        with os.fdopen(read_end, "rb") as pipe:
            outcome = pipe.read().decode()
        _, status = os.waitpid(pid, 0)
        self.assertEqual(status, 0)
        self.assertTrue(outcome.startswith("FailedPrecondition"), outcome)
        self.assertIn("belongs to process %d" % os.getpid(), outcome)
        # Nothing the child did reached the coordinator, and the parent's session still works.
        self.assertIsNone(c.kv_try_get("from-child"))
        self.assertEqual(c.kv_get("before-fork", timeout=5), b"1")
        c.barrier("after-fork", timeout=10, tasks=[0])

    def test_new_incarnation_aborts_the_old_one(self):
        a = self.client(0)
        old = self.client(1)
        peers = []
        a.on_peer_change(peers.append)
        self.client(1, incarnation=1)
        self.assertTrue(harness.eventually(
            lambda: any(p.task_id == 1 and p.incarnation == 1 for p in peers), 10), peers)
        with self.assertRaises(phalanx.Aborted):
            old.barrier("after-restart", timeout=5)

    def test_sync_point_after_notify_preemption_is_the_same_step_for_every_task(self):
        a, b = self.client(0), self.client(1)
        rounds = []
        a.on_preemption(rounds.append)
        b.on_preemption(rounds.append)
        synced = {}

        def train(c):
            for step in range(200):
                if c.reached_sync_point(step):
                    synced[c.task_id] = step
                    return step
                if step == 5 and c.task_id == 0:
                    c.notify_preemption("test: node going away", deadline=time.time() + 30,
                                        tasks=[1])
                c.barrier("step-%d" % step, timeout=20)
                time.sleep(0.01)
            return None

        join_b = in_thread(train, b)
        step_a = train(a)
        step_b = join_b()
        self.assertIsNotNone(step_a)
        self.assertEqual(step_a, step_b)
        self.assertGreater(step_a, 5)
        self.assertTrue(harness.eventually(lambda: len(rounds) == 2, 5), rounds)
        self.assertEqual({r.round for r in rounds}, {rounds[0].round})
        self.assertIn("node going away", rounds[0].reason)
        self.assertEqual(list(rounds[0].affected_tasks), [1])
        self.assertIsNotNone(rounds[0].deadline)

    def test_peer_failure_is_reported_to_the_callback(self):
        a, b = self.client(0), self.client(1)
        peers = []
        a.on_peer_change(peers.append)
        b.close()  # no shutdown: the session breaks, as for a crash
        self.assertTrue(harness.eventually(
            lambda: any(p.task_id == 1 and p.state == phalanx.TaskState.FAILED for p in peers), 10),
            peers)

    def test_a_killed_peer_fails_the_barrier_at_once_naming_it(self):
        """Fail fast: a SIGKILLed peer process ends the survivor's barrier right away (Cancelled
        naming the task), not at its 300 s timeout, whether the survivor arrived before the kill
        or after it (the order is not controlled here; the service tests pin both, and the
        blocking get's, deterministically)."""
        env = dict(os.environ, **self.coordinator.env(1), PYTHONPATH=harness.PYTHON_DIR)
        peer = subprocess.Popen(
            [sys.executable, "-c", "import phalanx, sys, time; phalanx.init(timeout=20); "
             "print('ready', flush=True); time.sleep(600)"],
            env=env, stdout=subprocess.PIPE)
        try:
            self.assertIsNotNone(harness.read_line(peer, "ready", 30), "the peer did not connect")
            a = self.client(0)
            barrier = in_thread(a.barrier, "step-1", 300)
            peer.kill()
            peer.wait(10)
            with self.assertRaises(phalanx.Cancelled) as caught:
                barrier(60)  # far below the 300 s timeout
            self.assertEqual(caught.exception.failed_tasks, [1], caught.exception.message)
            self.assertIn("peer task 1 (incarnation 0) failed", caught.exception.message)
            with self.assertRaises(phalanx.Cancelled) as caught:
                a.barrier("step-2", 300)  # task 1 is still failed: no wait at all
            self.assertEqual(caught.exception.failed_tasks, [1])
        finally:
            harness.stop(peer)

    def test_a_whole_job_restart_rendezvous_waits_for_the_slower_task(self):
        """Issue 35, fail fast only on news: both tasks pass ``b0`` and exit without a shutdown
        (their sessions break); both come back as incarnation 2, task 0 a second after task 1.
        Task 1's ``b1`` waits for task 0's new incarnation instead of failing at once on the
        previous one's failure, and both pass it. Real processes, a real coordinator."""
        coordinator = harness.Coordinator(num_tasks=2, extra_args=["--metrics_listen=127.0.0.1:0"])
        self.addCleanup(coordinator.close)
        script = ("import phalanx, sys; c = phalanx.init(timeout=20); "
                  "print('arriving', flush=True); c.barrier(sys.argv[1], 60); "
                  "print('passed', sys.argv[1], flush=True)")

        def task(task_id, incarnation, barrier):
            env = dict(os.environ, **coordinator.env(task_id, incarnation),
                       PYTHONPATH=harness.PYTHON_DIR)
            return subprocess.Popen([sys.executable, "-c", script, barrier], env=env,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE)

        def finish(proc):
            try:
                out, err = proc.communicate(timeout=90)
            finally:
                harness.stop(proc)
            return proc.returncode, out.decode() + err.decode()

        for proc in [task(0, 0, "b0"), task(1, 0, "b0")]:
            code, out = finish(proc)
            self.assertEqual(code, 0, out)
        # Both failures are behind us (the coordinator saw both sessions end) before either
        # task comes back: what makes them old news to the new incarnations.
        self.assertTrue(harness.eventually(
            lambda: coordinator.metric("phalanx_coordinator_tasks_connected") == 0, 30))
        again = task(1, 2, "b1")
        if harness.read_line(again, "arriving", 30) is None:
            self.fail("task 1 did not connect: %s" % (finish(again),))
        time.sleep(1)  # before the fix, task 1's b1 had failed by now
        if again.poll() is not None:
            self.fail("task 1 did not wait for task 0: %s" % (finish(again),))
        later = task(0, 2, "b1")
        results = [finish(proc) for proc in (again, later)]
        for code, out in results:
            self.assertEqual(code, 0, results)
            self.assertIn("passed b1", out)

    def test_a_task_that_leaves_fails_no_peer_and_its_next_incarnation_joins(self):
        """Issue 35 (8): leave() is a departure, not a failure. The peer waiting with it at a
        barrier keeps waiting (a plain close() would have failed that barrier at once), hears
        SHUTDOWN with the reason, and passes the barrier with the task's next incarnation."""
        a, b = self.client(0), self.client(1)
        peers = []
        a.on_peer_change(peers.append)
        waiting = in_thread(a.barrier, "rendezvous", 60)
        b.leave("moving to another node")
        b.close()
        left = lambda: [p for p in peers if p.task_id == 1 and
                        p.state == phalanx.TaskState.SHUTDOWN]  # noqa: E731
        self.assertTrue(harness.eventually(left, 10), peers)
        self.assertIn("left: moving to another node", left()[0].reason)
        b2 = self.client(1, connect=False)
        with self.assertRaises(phalanx.FailedPrecondition):
            b2.leave()  # never connected: nothing to leave
        c = self.client(1, incarnation=1)
        c.barrier("rendezvous", 30)
        waiting(30)  # passed, not Cancelled

    def test_report_error_fails_the_task_for_its_peers(self):
        a, b = self.client(0), self.client(1)
        peers = []
        a.on_peer_change(peers.append)
        b.report_error("loss is NaN")
        self.assertTrue(harness.eventually(
            lambda: any(p.task_id == 1 and "NaN" in p.reason for p in peers), 10), peers)

    def test_report_rolled_back_is_accepted_and_garbage_refused(self):
        a, b = self.client(0), self.client(1)
        a.report_rolled_back("e1", 2.5)
        b.report_rolled_back("e1", 3)  # the same recovery: the coordinator counts it once
        with self.assertRaises(phalanx.InvalidArgument):
            a.report_rolled_back("e2", -1)
        with self.assertRaises(phalanx.InvalidArgument):
            a.report_rolled_back("", 1)

    def test_report_stepping_is_a_cheap_call_per_step(self):
        a = self.client(0)
        for _ in range(1000):  # one report reaches the coordinator; the rest are a flag check
            a.report_stepping()
        a.close()
        with self.assertRaises(phalanx.Error):
            a.report_stepping()

    def test_shutdown_barrier_then_close(self):
        a, b = self.client(0), self.client(1)
        join = in_thread(b.shutdown, 20)
        a.shutdown(timeout=20)
        join()
        a.close()
        a.close()  # idempotent
        with self.assertRaises(phalanx.FailedPrecondition):
            a.barrier("closed", 1)


class RewordedErrorsTest(unittest.TestCase):
    """The clients read an error's details, never its words: a coordinator that rewords every
    message it sends (--testing_reword_errors) changes nothing the Python API reports."""

    def setUp(self):
        self.coordinator = harness.Coordinator(num_tasks=2, extra_args=["--testing_reword_errors"])
        self.clients = []

    def tearDown(self):
        for c in self.clients:
            c.close()
        self.coordinator.close()

    def client(self, task_id):
        env = self.coordinator.env(task_id)
        c = phalanx.Client(env["PHALANX_COORDINATOR"], env["PHALANX_JOB"], task_id,
                           self.coordinator.num_tasks, 0, env["PHALANX_TOKEN"])
        self.clients.append(c)
        c.connect(timeout=20)
        return c

    def test_timeouts_name_the_missing_tasks_and_the_barrier(self):
        a = self.client(0)
        self.client(1)  # connected, but never enters the barrier nor asks
        with self.assertRaises(phalanx.DeadlineExceeded) as cm:
            a.barrier("lonely", timeout=0.5)
        self.assertEqual(cm.exception.message, "reworded DEADLINE_EXCEEDED")
        self.assertEqual(cm.exception.missing_tasks, [1])
        self.assertEqual(cm.exception.barrier_id, "lonely")
        self.assertEqual(cm.exception.reason, "BARRIER_TIMED_OUT")
        with self.assertRaises(phalanx.DeadlineExceeded) as cm:
            a.alive_tasks(timeout=0.5)
        self.assertEqual(cm.exception.missing_tasks, [1], cm.exception.details)
        self.assertEqual(cm.exception.reason, "ALIVE_TASKS_TIMED_OUT")

    def test_a_failed_peer_is_named_with_its_incarnation(self):
        a, b = self.client(0), self.client(1)
        b.close()  # no shutdown: the session breaks, as for a crash
        with self.assertRaises(phalanx.Cancelled) as cm:  # at the break, not the timeout
            a.barrier("after-the-crash", timeout=60)
        caught = cm.exception
        self.assertEqual(caught.message, "reworded CANCELLED")
        self.assertEqual(caught.failed_tasks, [1], caught.details)
        self.assertEqual(caught.failed_incarnations, {1: 0})
        self.assertEqual(caught.reason, "PEER_FAILED")
        self.assertTrue(caught.details.get("failure_reason"), caught.details)


class LibraryTest(unittest.TestCase):
    def test_a_bad_phalanx_library_path_says_where_it_looked(self):
        env = dict(os.environ, PHALANX_LIBRARY="/nonexistent/libphalanx_c.so",
                   PYTHONPATH=harness.PYTHON_DIR)
        out = subprocess.run(
            [sys.executable, "-c",
             "import phalanx\ntry:\n  phalanx.find_library()\nexcept phalanx.LibraryNotFound as e:\n"
             "  print('ERR', e)"], env=env, capture_output=True, timeout=30)
        text = out.stdout.decode()
        self.assertIn("ERR", text, out.stderr.decode())
        self.assertIn("/nonexistent/libphalanx_c.so", text)
        self.assertIn("PHALANX_LIBRARY", text)

    def test_errors_read_the_details_and_survive_bad_ones(self):
        e = phalanx.error_from_code(1, "whatever it says", '{"reason": "PEER_FAILED", '
                                    '"failed_tasks": [{"task_id": 2, "incarnation": "5"}]}')
        self.assertIsInstance(e, phalanx.Cancelled)
        self.assertEqual((e.failed_tasks, e.failed_incarnations, e.reason),
                         ([2], {2: 5}, "PEER_FAILED"))
        for bad in ["", "{", "[1, 2]", "null"]:
            e = phalanx.error_from_code(4, "timed out", bad)
            self.assertEqual((e.details, e.missing_tasks, e.barrier_id), ({}, [], None), bad)


if __name__ == "__main__":
    unittest.main()
