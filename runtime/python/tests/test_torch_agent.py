"""A failing GPU aborts exactly the process group that uses it (issue 17, with plain processes).

A real ``phalanx-agent`` (fake GPUs: ``--fake_gpus=4``, its clique registry on TCP as task pods
reach it) and a real torch job (4 ranks of ``runtime/python/examples/torch_train.py`` on
``phalanx.torch_recovery.Manager``, gloo on CPU standing in for NCCL; rank r uses "GPU" r through
``LOCAL_RANK``). A scripted XID 79 on GPU 1 (``--fake_xid_file``) makes the agent ask task 1, and
only task 1, to abort: it fails its collective, reports the error and exits 5 (leave the GPU);
the other ranks re-form with its replacement (started by the supervisor, as the operator would,
on a node whose agent has nothing to say) and are never restarted; the final parameters are
bitwise those of the undisturbed one-process reference.

Prints ``xid_to_abort_ms`` (the XID line written → the task's ``device_failed`` event) and
``xid_to_resumed_s`` (→ every rank re-formed): figures, not assertions.

Exits 77 (CTest: skipped) with the reason when torch cannot be imported."""

import os
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402  (sets PHALANX_LIBRARY before phalanx loads it)

harness.require_torch()

import rank_supervisor  # noqa: E402
from test_torch_recovery import RANKS, TRAIN, count, reference_sha256  # noqa: E402

TIMEOUT = 120  # a bound for a loaded 2-core machine; nothing here asserts speed
ARGS = ["--steps=80", "--step_time=0.05"]
FAILING_GPU = 1


class TorchAgentTest(unittest.TestCase):
    def test_an_xid_on_one_gpu_moves_only_the_task_using_it_and_the_result_is_unchanged(self):
        coordinator = harness.Coordinator(num_tasks=RANKS, job="gpujob", heartbeat_timeout="2s")
        self.addCleanup(coordinator.close)
        agent = harness.Agent(coordinator.dir, gpus=RANKS)
        self.addCleanup(agent.close)

        def env_for(task, incarnation):
            # The first processes run on the agent's node; a replacement runs elsewhere.
            if incarnation > 0:
                return {}
            return {"PHALANX_CLIQUE_ADDRESS": agent.address, "LOCAL_RANK": str(task)}

        # No hung ranks here: the task on the failed GPU reports its failure and exits by itself.
        ranks = rank_supervisor.RankSupervisor(coordinator, [TRAIN] + ARGS, RANKS,
                                               env_for=env_for, kill_hung=False)
        self.addCleanup(ranks.close)
        self.assertTrue(ranks.wait_for(lambda ev, ex: ranks.min_step() >= 10, TIMEOUT),
                        "the ranks did not reach step 10; logs in %s" % coordinator.dir)
        injected_ms = int(time.time() * 1000)
        agent.inject_xid(FAILING_GPU, 79)

        def device_failed(ev, ex):
            return [e for e in ev if e["kind"] == "device_failed"]
        left = ranks.wait_for(device_failed, TIMEOUT)
        self.assertTrue(left, "no task left its failed GPU; logs in %s" % coordinator.dir)
        self.assertEqual([(e["task"], e["devices"]) for e in left], [(str(FAILING_GPU), "1")])
        self.assertIn("XID_79", left[0]["reason"])  # event values have no spaces
        self.assertTrue(ranks.wait_for(
            lambda ev, ex: count(ev, "recovered", injected_ms) >= RANKS - 1
            and count(ev, "formed", injected_ms) >= 1, TIMEOUT), "the group did not re-form")
        resumed_ms = max(int(e["t_ms"]) for e in ranks.events
                         if e["kind"] in ("recovered", "formed") and int(e["t_ms"]) > injected_ms)

        finished = ranks.wait_for(lambda ev, ex: len(ranks.finals()) == RANKS, TIMEOUT)
        self.assertTrue(finished, "the job did not finish; logs in %s" % coordinator.dir)
        finals = ranks.finals()
        self.assertEqual({f["params_sha256"] for f in finals.values()}, {reference_sha256(ARGS)},
                         "final parameters differ from the undisturbed run's")
        # Exactly the task on the failed GPU left (exit 5); the others were never restarted.
        self.assertEqual(sorted((t, c) for t, _, c in ranks.exits if c != 0),
                         [(FAILING_GPU, 5)])
        for task in range(RANKS):
            self.assertEqual(finals[task]["inc"], "1" if task == FAILING_GPU else "0", task)
        print("xid_to_abort_ms=%d xid_to_resumed_s=%.2f" % (
            int(left[0]["t_ms"]) - injected_ms, (resumed_ms - injected_ms) / 1000.0))


if __name__ == "__main__":
    unittest.main()
