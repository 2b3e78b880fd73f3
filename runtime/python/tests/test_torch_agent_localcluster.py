"""A failing GPU on the local cluster (issue 17): one phalanx-agent per node (4 fake GPUs each,
``--gpu_failure_policy=task``, its clique channel on its node's own address), the operator wiring
task pods to it (``--agent_clique_port``: ``PHALANX_NODE_IP`` from ``status.hostIP``,
``PHALANX_CLIQUE_ADDRESS``), and a torch TrainingJob of 4 tasks (gloo on CPU standing in for
NCCL; task t uses fake GPU t % 4 of its node, as a device plugin would hand them out). A scripted
XID 79 on the GPU of one task on a node that runs two: only that task aborts its group and is
restarted (exit 5, a new incarnation); its neighbour on the same node and the others keep their
first pods; the job succeeds with every task's final parameters bitwise the undisturbed run's.

Exits 77 (CTest: skipped) with the reason when torch cannot be imported."""

import collections
import json
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from localcluster_case import KUBECTL, LocalClusterCase  # noqa: E402
from test_torch_localcluster import RANKS, TIMEOUT, TRAIN, reference_sha256  # noqa: E402

# Long enough (30 s of steps) that the XID lands while the job still trains: with 240 steps a
# loaded CI machine finished the job during the test's own kubectl calls, before the injection.
ARGS = ["--steps=600", "--step_time=0.05"]

harness.require_torch()

# The task's fake GPU: what CUDA_VISIBLE_DEVICES would say under a device plugin.
WRAPPER = 'LOCAL_RANK=$((PHALANX_TASK_ID % 4)) exec "$0" "$@"'


@unittest.skipUnless(os.path.exists(KUBECTL), "kubectl is not installed at " + KUBECTL)
class TorchAgentLocalClusterTest(LocalClusterCase):
    JOB = "gpujob"
    NODES = 2
    AGENT_GPUS = 4
    AGENT_POLICY = "task"

    def pod_of(self, task, incarnation):
        return "%s-task-%d-%d" % (self.JOB, task, incarnation)

    def steps(self):
        reached = []
        for task in range(RANKS):
            found = [int(self.field(e, "step")) for e in self.task_pod_events("step", task)]
            reached.append(max(found, default=0))
        return min(reached)

    def node_of(self, pod):
        return self.kubectl("get", "pod", pod, "-o", "jsonpath={.spec.nodeName}").strip()

    def test_an_xid_on_one_gpu_moves_only_its_task_and_the_oracle_holds(self):
        self.apply_python_job(
            RANKS, ["/bin/sh", "-c", WRAPPER, sys.executable, TRAIN] + ARGS, max_restarts=10,
            extra_env=[{"name": "GLOO_SOCKET_IFNAME", "value": "lo"}],
            # Nothing here hangs (the victim exits 5, and its stream's end is the signal): a
            # timeout long enough that four torch ranks, the control plane and the agents on
            # two loaded cores never look hung (2 s once cost a second restart).
            spec={"coordination": {"heartbeatIntervalSeconds": 1, "heartbeatTimeoutSeconds": 10}})
        self.assertTrue(harness.eventually(lambda: self.steps() >= 10, TIMEOUT, 0.2),
                        "the tasks did not reach step 10; job=%s" % json.dumps(self.job()))
        # Wired: every task pod got its node's agent address.
        for task in range(RANKS):
            pod = json.loads(self.kubectl("get", "pod", self.pod_of(task, 0), "-o", "json"))
            env = {e["name"]: e for e in pod["spec"]["containers"][0].get("env", [])}
            self.assertIn("PHALANX_CLIQUE_ADDRESS", env, "task %d has no agent channel" % task)
            self.assertEqual(env["PHALANX_NODE_IP"]["valueFrom"]["fieldRef"]["fieldPath"],
                             "status.hostIP")

        by_node = collections.defaultdict(list)
        for task in range(RANKS):
            by_node[self.node_of(self.pod_of(task, 0))].append(task)
        node, tasks = max(by_node.items(), key=lambda item: len(item[1]))
        self.assertGreaterEqual(len(tasks), 2, "4 tasks on 2 nodes: one node runs two")
        victim, neighbour = tasks[0], tasks[1]
        self.inject_xid(int(node.rsplit("-", 1)[1]), victim % 4, 79)

        victim_pod = self.pod_of(victim, 0)
        self.assertTrue(harness.eventually(lambda: self.events(victim_pod, "device_failed"),
                                           TIMEOUT, 0.2),
                        "task %d never left GPU %d: %s" % (victim, victim % 4,
                                                          self.log(victim_pod)[-3000:]))
        self.assertTrue(harness.eventually(
            lambda: self.events(self.pod_of(victim, 1), "formed"), TIMEOUT, 0.2),
            "task %d's replacement never joined; job=%s" % (victim, json.dumps(self.job())))

        self.wait_succeeded()
        status = self.job()["status"]
        expected = reference_sha256(ARGS)
        for task in range(RANKS):
            final = self.task_pod_events("final", task)
            self.assertTrue(final, "task %d has no final event" % task)
            self.assertEqual(self.field(final[-1], "params_sha256"), expected,
                             "task %d ended elsewhere than the undisturbed run" % task)
        # Only the task on the failed GPU was restarted; its neighbour kept its first pod.
        self.assertEqual(status.get("restarts"), 1, status)
        restarted = {t["index"]: t.get("restarts", 0) for t in status.get("tasks", [])}
        self.assertEqual(restarted, {t: int(t == victim) for t in range(RANKS)}, status)
        self.assertTrue(self.events(self.pod_of(neighbour, 0), "final"),
                        "task %d on the same node was disturbed" % neighbour)
        # The node is still schedulable (policy task), and says which GPU failed and why.
        node_json = json.loads(self.kubectl("get", "node", node, "-o", "json"))
        taints = [t["key"] for t in node_json["spec"].get("taints", [])]
        self.assertNotIn("phalanx.dev/gpu-failed", taints)
        healthy = [c for c in node_json["status"]["conditions"]
                   if c["type"] == "PhalanxGpuHealthy"]
        self.assertEqual(healthy[0]["status"], "False", healthy)
        events = self.kubectl("get", "events", "-A", "-o",
                              "jsonpath={range .items[*]}{.reason}: {.message}{\"\\n\"}{end}")
        self.assertRegex(events, r"GpuFailed: GPU %d .*XID 79" % (victim % 4))
        self.assertRegex(events, r"TaskRestarted: task %d " % victim)
        sys.stderr.write("events:\n%s\njob status: %s\n" % (events, json.dumps(status)))
        self.passed = True


if __name__ == "__main__":
    unittest.main()
