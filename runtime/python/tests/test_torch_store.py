"""PhalanxStore (phalanx/torch_store.py) under torch.distributed for real (Debian's
python3-torch, CPU, gloo): the c10d Store API against a real phalanx-coordinator, and a gloo
process group of three ranks in three processes whose rendezvous goes through it.

Exits 77 (CTest: skipped) with the reason when torch cannot be imported."""

import datetime
import os
import subprocess
import sys
import textwrap
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402  (sets PHALANX_LIBRARY before phalanx loads it)

harness.require_torch()
import torch.distributed as dist  # noqa: E402

harness.use_source_package()
import phalanx  # noqa: E402
from phalanx.torch_store import PhalanxStore, escape_key  # noqa: E402

TIMEOUT = 60  # generous for a loaded 2-core machine; the assertions are never about speed

# One rank: joins the job, forms a gloo group through a PhalanxStore, runs collectives.
WORKER = textwrap.dedent("""
    import datetime, sys
    sys.path[:0] = %(python_path)r
    import phalanx, torch, torch.distributed as dist
    from phalanx.torch_store import PhalanxStore
    client = phalanx.init(timeout=%(timeout)d)
    store = PhalanxStore(client, prefix="pg/test", timeout=%(timeout)d)
    dist.init_process_group("gloo", store=store, rank=client.task_id, world_size=%(world)d,
                            timeout=datetime.timedelta(seconds=%(timeout)d))
    t = torch.tensor([float(client.task_id + 1)])
    dist.all_reduce(t)
    b = torch.tensor([42.0 if client.task_id == 0 else 0.0])
    dist.broadcast(b, src=0)
    dist.barrier()
    print("RESULT rank=%%d sum=%%g broadcast=%%g" %% (client.task_id, t.item(), b.item()),
          flush=True)
    dist.destroy_process_group()
    phalanx.close()
""")


WORLD = 3  # the gloo group's ranks are tasks 0-2; this test's own client is task 3


class TorchStoreTest(unittest.TestCase):
    def setUp(self):
        self.coordinator = harness.Coordinator(num_tasks=WORLD + 1)
        env = self.coordinator.env(WORLD)
        self.client = phalanx.Client(env["PHALANX_COORDINATOR"], env["PHALANX_JOB"], WORLD,
                                     WORLD + 1, 0, env["PHALANX_TOKEN"])
        self.client.connect(timeout=TIMEOUT)
        self.store = PhalanxStore(self.client, prefix="unit", timeout=5)

    def tearDown(self):
        self.client.close()
        self.coordinator.close()

    def test_the_store_api_as_torch_calls_it(self):
        s = self.store
        self.assertIsInstance(s, dist.Store)
        s.set("/default_pg//0", b"\x00bytes")  # c10d keys hold '/' and empty segments
        self.assertEqual(s.get("/default_pg//0"), b"\x00bytes")
        self.assertEqual(self.client.kv_try_get("unit/%2Fdefault_pg%2F%2F0"), b"\x00bytes")
        self.assertEqual(s.add("counter", 2), 2)
        self.assertEqual(s.add("counter", 3), 5)
        self.assertEqual(s.get("counter"), b"5")
        # compare_set: an empty expected means "only if absent"; the answer is the value now.
        self.assertEqual(s.compare_set("leader", "", "r0"), b"r0")
        self.assertEqual(s.compare_set("leader", "", "r1"), b"r0")
        self.assertEqual(s.compare_set("leader", "r0", "r2"), b"r2")
        self.assertEqual(s.compare_set("leader", "r0", "r3"), b"r2")
        self.assertEqual(s.compare_set("nobody", "x", "y"), b"x")  # TCPStore's answer
        self.assertFalse(s.check(["nobody"]))
        self.assertTrue(s.check(["leader", "counter"]))
        self.assertEqual(s.num_keys(), 3)
        self.assertTrue(s.delete_key("leader"))
        self.assertFalse(s.delete_key("leader"))
        self.assertEqual(s.num_keys(), 2)
        s.wait(["counter"])
        s.wait(["counter"], datetime.timedelta(seconds=1))
        with self.assertRaises(phalanx.DeadlineExceeded):
            s.wait(["never"], datetime.timedelta(milliseconds=200))
        s.set_timeout(datetime.timedelta(milliseconds=200))
        with self.assertRaises(phalanx.DeadlineExceeded):
            s.get("never")

    def test_a_set_is_seen_by_this_store_at_once_and_by_a_waiting_other(self):
        """set does not wait for the answer (TCPStore.set's contract): this store's next calls
        are handled after it, and another task's blocking wait sees it."""
        env = self.coordinator.env(0)
        other_client = phalanx.Client(env["PHALANX_COORDINATOR"], env["PHALANX_JOB"], 0,
                                      WORLD + 1, 0, env["PHALANX_TOKEN"])
        other_client.connect(timeout=TIMEOUT)
        try:
            other = PhalanxStore(other_client, prefix="unit", timeout=TIMEOUT)
            for i in range(20):
                self.store.set("ordered-%d" % i, b"7")
                self.assertTrue(self.store.check(["ordered-%d" % i]), i)
                self.assertEqual(self.store.add("ordered-%d" % i, 1), 8)
                self.store.set("seen-%d" % i, b"7")
                other.wait(["seen-%d" % i])
                self.assertEqual(other.add("seen-%d" % i, 1), 8)
            self.assertGreaterEqual(self.store.num_keys(), 40)
        finally:
            other_client.close()

    def test_wait_sets_makes_a_set_visible_to_everyone_when_it_returns(self):
        """With wait_sets=True the moment set returns, another task's store sees the value
        through check, add and compare_set."""
        env = self.coordinator.env(0)
        other_client = phalanx.Client(env["PHALANX_COORDINATOR"], env["PHALANX_JOB"], 0,
                                      WORLD + 1, 0, env["PHALANX_TOKEN"])
        other_client.connect(timeout=TIMEOUT)
        try:
            waiting = PhalanxStore(self.client, prefix="unit", timeout=5, wait_sets=True)
            other = PhalanxStore(other_client, prefix="unit", timeout=5)
            for i in range(20):
                waiting.set("stored-%d" % i, b"7")
                self.assertTrue(other.check(["stored-%d" % i]), i)
                self.assertEqual(other.add("stored-%d" % i, 1), 8)
                self.assertEqual(other.compare_set("stored-%d" % i, "8", "9"), b"9")
        finally:
            other_client.close()

    def test_a_failed_set_reaches_the_caller(self):
        # A value over the coordinator's 1 MiB limit is refused by the coordinator: the set
        # itself, or the next one, raises it (never silence).
        with self.assertRaises((phalanx.InvalidArgument, phalanx.ResourceExhausted)) as raised:
            self.store.set("too-big", b"x" * (2 << 20))
            self.store.set("after", b"1")
            self.store.num_keys()
        self.assertIn("too-big", str(raised.exception))

    def test_keys_are_escaped_into_one_segment(self):
        self.assertEqual(escape_key("rank_0"), "rank_0")
        self.assertEqual(escape_key("/a b%"), "%2Fa%20b%25")
        self.assertEqual(escape_key(""), "%")
        with self.assertRaises(ValueError):
            PhalanxStore(self.client, prefix="/")

    def test_a_torchrun_agent_that_stops_leaves_the_rendezvous_open_for_its_replacement(self):
        # torch's launcher shuts the handler down whenever its agent stops, failed or not; the
        # agent's pod then comes back as the task's next incarnation, whose first rendezvous
        # must not find the run closed (it once spent a job's maxRestarts that way).
        from phalanx.torchrun import PhalanxRendezvousHandler, close_rendezvous
        failed = PhalanxRendezvousHandler(self.client, "run")
        self.assertTrue(failed.shutdown())
        replacement = PhalanxRendezvousHandler(self.client, "run")
        self.assertFalse(replacement.is_closed())
        # A run whose workers succeeded closes it: a late agent stops instead of waiting.
        close_rendezvous(self.client, "run")
        self.assertTrue(replacement.is_closed())
        self.assertFalse(PhalanxRendezvousHandler(self.client, "another-run").is_closed())

    def test_a_gloo_group_forms_and_reduces_through_it(self):
        python_path = [] if harness.INSTALLED else [harness.PYTHON_DIR]
        script = WORKER % {"python_path": python_path, "timeout": TIMEOUT, "world": WORLD}
        procs = []
        for rank in range(WORLD):
            env = dict(os.environ)
            env.update(self.coordinator.env(rank))
            env["GLOO_SOCKET_IFNAME"] = "lo"  # gloo's own connections stay on 127.0.0.1
            env["MASTER_ADDR"] = "203.0.113.1"  # never used: the store replaces the TCPStore
            procs.append(subprocess.Popen([sys.executable, "-c", script], env=env,
                                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT))
        outputs = []
        for p in procs:
            try:
                out, _ = p.communicate(timeout=TIMEOUT * 2)
            except subprocess.TimeoutExpired:
                for q in procs:
                    q.kill()
                raise
            outputs.append((p.returncode, out.decode("utf-8", "replace")))
        for rank, (code, out) in enumerate(outputs):
            self.assertEqual(code, 0, "rank %d:\n%s" % (rank, out))
            self.assertIn("RESULT rank=%d sum=6 broadcast=42" % rank, out)  # 1 + 2 + 3
        # The rendezvous used the coordinator's key-value store under the group's prefix.
        self.assertGreater(len(self.client.kv_dir("pg/test")), 0)


if __name__ == "__main__":
    unittest.main()
