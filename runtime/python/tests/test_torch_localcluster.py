"""The bitwise oracle on the local cluster (issue 14): a real torch job (an MLP under DDP, gloo, 4
tasks of ``runtime/python/examples/torch_train.py`` on ``phalanx.torch_recovery.Manager``) runs as
a TrainingJob with ``restartScope: Task`` on phalanx-localcluster (a real control plane where the
envtest assets are found) under phalanx-operator, through a SIGKILLed task, a SIGSTOPped (hung)
task, a suspend and resume, a SIGKILLed coordinator pod and a node preemption. The job succeeds
and every task's final parameters are bitwise the undisturbed run's (``torch_train.py
--reference``, which test_torch_recovery pins to a real undisturbed run).

Exits 77 (CTest: skipped) with the reason when torch cannot be imported."""

import glob
import json
import os
import re
import signal
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from localcluster_case import KUBECTL, LocalClusterCase  # noqa: E402

harness.require_torch()

TRAIN = os.path.join(harness.PYTHON_DIR, "examples", "torch_train.py")
RANKS = 4
ARGS = ["--steps=300", "--step_time=0.05"]
TIMEOUT = 120  # per phase, for a loaded 2-core machine; nothing here asserts speed


def reference_sha256(args=ARGS):
    """The parameters' hash of the undisturbed run (``torch_train.py --reference``) of ``args``."""
    out = subprocess.run([sys.executable, TRAIN, "--reference=%d" % RANKS] + args,
                         env=dict(os.environ, **harness.package_env()), capture_output=True,
                         timeout=TIMEOUT, check=True).stdout.decode()
    return LocalClusterCase.field(out.strip().splitlines()[-1], "params_sha256")


@unittest.skipUnless(os.path.exists(KUBECTL), "kubectl is not installed at " + KUBECTL)
class TorchLocalClusterTest(LocalClusterCase):
    JOB = "torchjob"
    NODES = 3

    def create_job(self):
        # Until the test has made its last fault, the job's last 100 steps take a second each:
        # on a starved machine the job once ended before the preemption could land.
        self.faults_done = os.path.join(self.dir, "faults-done")
        self.apply_python_job(
            RANKS, [sys.executable, TRAIN] + ARGS + [
                "--checkpoint_dir=" + os.path.join(self.dir, "ckpt"),
                "--linger_file=" + self.faults_done, "--linger_steps=100"],
            max_restarts=10, extra_env=[{"name": "GLOO_SOCKET_IFNAME", "value": "lo"}],
            # Heartbeats are what finds the hung task; 2 s let a loaded machine (load 20 on 2
            # cores starves a process that long) declare a live task dead too: an extra restart.
            spec={"coordination": {"heartbeatIntervalSeconds": 1, "heartbeatTimeoutSeconds": 6}})

    def pod(self, task):
        """The newest pod of ``task`` that has a log (pods are <job>-task-<i>-<incarnation>)."""
        logs = glob.glob(os.path.join(self.dir, "cluster", "logs",
                                      "default_%s-task-%d-*.log" % (self.JOB, task)))
        incarnations = [int(re.search(r"-(\d+)\.log$", p).group(1)) for p in logs]
        return "%s-task-%d-%d" % (self.JOB, task, max(incarnations)) if incarnations else None

    def steps(self):
        """The lowest step the tasks' current pods reached."""
        reached = []
        for task in range(RANKS):
            pod = self.pod(task)
            found = [int(self.field(e, "step")) for e in self.events(pod, "step")] if pod else []
            reached.append(max(found, default=0))
        return min(reached)

    def wait_step(self, step):
        self.assertTrue(harness.eventually(lambda: self.steps() >= step, TIMEOUT, 0.2),
                        "the tasks did not reach step %d; job=%s" % (step, json.dumps(self.job())))

    def wait_formed(self, pod):
        self.assertTrue(harness.eventually(lambda: self.events(pod, "formed"), TIMEOUT, 0.2),
                        "%s never joined the group; job=%s" % (pod, json.dumps(self.job())))

    def node_of(self, pod):
        return self.kubectl("get", "pod", pod, "-o", "jsonpath={.spec.nodeName}").strip()

    def suspend_and_resume_losing_no_step(self):
        """Issue 31 (2) with PyTorch: spec.suspend opens a checkpoint round; every task
        checkpoints at one step and leaves (exit 4), the job is Suspended; after resume every
        task's next pod forms its group from that very step."""
        before = {task: self.pod(task) for task in range(RANKS)}
        self.kubectl("patch", "trainingjobs.phalanx.dev", self.JOB, "--type=merge",
                     "-p", '{"spec":{"suspend":true}}')
        self.assertTrue(harness.eventually(lambda: self.phase() == "Suspended", TIMEOUT, 0.2),
                        "not suspended; job=%s" % json.dumps(self.job()))
        left = {task: self.events(pod, "leaving") for task, pod in before.items()}
        self.assertTrue(all(left.values()), "a task did not checkpoint and leave: %s" % left)
        steps = {int(self.field(events[-1], "step")) for events in left.values()}
        self.assertEqual(len(steps), 1, "the tasks left at different steps: %s" % left)
        self.kubectl("patch", "trainingjobs.phalanx.dev", self.JOB, "--type=merge",
                     "-p", '{"spec":{"suspend":false}}')

        def resumed():
            pods = {task: self.pod(task) for task in range(RANKS)}
            formed = [self.events(pods[task], "formed") for task in range(RANKS)
                      if pods[task] != before[task]]
            return len(formed) == RANKS and all(formed) and formed
        formed = harness.eventually(resumed, TIMEOUT, 0.2)
        self.assertTrue(formed, "the resumed tasks did not form; job=%s" % json.dumps(self.job()))
        self.assertEqual({int(self.field(events[0], "step")) for events in formed}, steps,
                         "the resumed group did not start where the suspend checkpointed")
        sys.stderr.write("suspended at step %d, resumed from it\n" % steps.pop())

    def test_final_parameters_survive_kill_hang_coordinator_kill_and_preemption(self):
        self.create_job()
        self.wait_step(10)
        self.admin("kill-pod", "default/%s-task-2-0" % self.JOB)
        self.wait_formed("%s-task-2-1" % self.JOB)

        self.wait_step(40)
        self.admin("stop-pod", "default/%s-task-3-0" % self.JOB)  # only heartbeats can tell
        self.wait_formed("%s-task-3-1" % self.JOB)

        self.suspend_and_resume_losing_no_step()

        self.wait_step(70)
        self.admin("kill-pod", "default/%s-coordinator" % self.JOB)

        self.wait_step(100)
        victim = self.pod(1)
        self.admin("preempt-node", self.node_of(victim), "--grace-seconds", "5")
        self.assertTrue(harness.eventually(lambda: self.pod(1) != victim, TIMEOUT, 0.2),
                        "task 1 was not moved; job=%s" % json.dumps(self.job()))
        self.wait_formed(self.pod(1))

        open(self.faults_done, "w").close()
        self.wait_succeeded()
        status = self.job()["status"]
        expected = reference_sha256()
        for task in range(RANKS):
            # The task's pod that trained to the end (a later one would have found it done).
            final = self.events(self.pod(task), "final")
            self.assertTrue(final, self.log(self.pod(task)))
            self.assertEqual(self.field(final[-1], "params_sha256"), expected,
                             "task %d ended elsewhere than the undisturbed run" % task)
        # Every task's last pod succeeded: no crash at exit brought one back.
        self.assertEqual(status.get("restarts"), 2, status)  # the kill and the hang
        # In place: some survivor recovered without a restart (its incarnation-0 pod).
        survivors = [t for t in range(RANKS)
                     if self.events("%s-task-%d-0" % (self.JOB, t), "recovered")]
        self.assertTrue(survivors, "no task recovered in place")
        self.assertGreaterEqual(status.get("preemptions", 0), 1, status)
        self.assertGreaterEqual(status.get("coordinator", {}).get("restarts", 0), 1, status)
        sys.stderr.write("job status: %s\n" % json.dumps(status))
        self.passed = True


@unittest.skipUnless(os.path.exists(KUBECTL), "kubectl is not installed at " + KUBECTL)
class TorchSeveralRanksPerPodTest(LocalClusterCase):
    """``nprocPerNode: 2`` (issue 18): 2 pods of 2 ranks each under ``python3 -m phalanx.launch``;
    a SIGKILLed local rank is restarted in place by the launcher as its task's next incarnation
    (its pod and the other rank in it keep running), and the final parameters are still bitwise
    the undisturbed run's."""
    JOB = "torchnproc"
    NODES = 2
    PODS, NPROC = 2, 2

    def task_events(self, task, kind):
        """``kind`` events of ``task`` in its pod's logs (ranks of a pod share its log)."""
        return [e for e in self.task_pod_events(kind, task // self.NPROC)
                if " task=%d " % task in e]

    def steps(self):
        return min(max([int(self.field(e, "step")) for e in self.task_events(t, "step")],
                       default=0) for t in range(RANKS))

    def launcher_pid(self, task, incarnation):
        """The pid the launcher reported for ``task`` at ``incarnation`` (its log line)."""
        pattern = re.compile(r"phalanx-launch: local rank \d+: task %d, incarnation %d, pid (\d+)"
                             % (task, incarnation))
        match = pattern.search(self.log("%s-task-%d-0" % (self.JOB, task // self.NPROC)))
        return int(match.group(1)) if match else None

    def test_a_killed_local_rank_restarts_in_place_and_the_oracle_holds(self):
        self.apply_python_job(
            self.PODS, [sys.executable, "-m", "phalanx.launch", sys.executable, TRAIN] + ARGS
            + ["--checkpoint_dir=" + os.path.join(self.dir, "ckpt")], max_restarts=10,
            extra_env=[{"name": "GLOO_SOCKET_IFNAME", "value": "lo"}],
            # The killed rank's broken session is the detection; a short heartbeat timeout
            # would only let a loaded machine declare a live rank dead (an extra restart).
            spec={"nprocPerNode": self.NPROC,
                  "coordination": {"heartbeatIntervalSeconds": 1, "heartbeatTimeoutSeconds": 10}})
        self.assertTrue(harness.eventually(lambda: self.steps() >= 10, TIMEOUT, 0.2),
                        "the ranks did not reach step 10; job=%s" % json.dumps(self.job()))
        pid = self.launcher_pid(3, 0)
        self.assertIsNotNone(pid, self.log("%s-task-1-0" % self.JOB))
        os.kill(pid, signal.SIGKILL)
        self.assertTrue(
            harness.eventually(lambda: any(" inc=1 " in e for e in self.task_events(3, "formed")),
                               TIMEOUT, 0.2),
            "task 3 did not rejoin as incarnation 1; pod log:\n%s" % self.log(
                "%s-task-1-0" % self.JOB))
        # The operator counts it (issue 32 item 4): the coordinator saw incarnation 1 register.
        self.assertTrue(
            harness.eventually(lambda: self.job().get("status", {}).get("rankRestarts") == 1,
                               TIMEOUT, 0.2),
            "status.rankRestarts is not 1: %s" % json.dumps(self.job().get("status")))
        events = json.loads(self.kubectl("get", "events", "-o", "json"))["items"]
        restarted = [e for e in events if e.get("reason") == "RankRestarted"]
        self.assertTrue(restarted, "no RankRestarted Event: %s" % [e.get("reason")
                                                                   for e in events])
        self.assertIn("task 1's pod %s-task-1-0" % self.JOB, restarted[0]["message"])

        self.wait_succeeded()
        status = self.job()["status"]
        expected = reference_sha256()
        for task in range(RANKS):
            final = self.task_events(task, "final")
            self.assertTrue(final, "task %d has no final event" % task)
            self.assertEqual(self.field(final[-1], "params_sha256"), expected,
                             "task %d ended elsewhere than the undisturbed run" % task)
        self.assertIn(" inc=1 ", self.task_events(3, "final")[-1])
        # In place: no pod was restarted, the operator reports its 2 pods and the rank restart.
        self.assertEqual(status.get("restarts", 0), 0, status)
        self.assertEqual(status.get("rankRestarts"), 1, status)
        self.assertEqual(status["tasks"][1].get("rankRestarts"), 1, status)
        self.assertEqual(len(status.get("tasks", [])), self.PODS, status)
        self.assertIn("local rank 1 (task 3) ended with signal SIGKILL: restarting it in place",
                      self.log("%s-task-1-0" % self.JOB))
        # The replacement was the launcher's warm standby (torch imported before the kill).
        self.assertRegex(self.log("%s-task-1-0" % self.JOB),
                         r"local rank 1: task 3, incarnation 1, pid \d+ \(the warm standby\)")
        sys.stderr.write("job status: %s\n" % json.dumps(status))
        self.passed = True


@unittest.skipUnless(os.path.exists(KUBECTL), "kubectl is not installed at " + KUBECTL)
class TorchrunLocalClusterTest(LocalClusterCase):
    """An unmodified torchrun script (``examples/torchrun_train.py``: DDP, env://, its own
    snapshots) under ``python3 -m phalanx.torchrun`` (issue 18): 2 pods, each one elastic agent
    (the pod's Phalanx task) with 2 workers. A SIGKILLed worker makes both agents restart their
    workers; a SIGKILLed pod is seen by the coordinator (session broken), and the other agent
    restarts its workers on Phalanx's word, not on a keep-alive timeout; the operator replaces
    the pod as its next incarnation and the job finishes with every worker agreeing."""
    JOB = "torchrunjob"
    NODES = 2
    STEPS = 150

    def steps(self):
        return max([int(self.field(e, "step")) for e in self.task_pod_events("step")], default=0)

    def test_an_unmodified_torchrun_script_recovers_through_phalanx(self):
        script = os.path.join(harness.PYTHON_DIR, "examples", "torchrun_train.py")
        self.apply_python_job(
            2, [sys.executable, "-m", "phalanx.torchrun", "--nproc_per_node=2", script,
                "--steps=%d" % self.STEPS, "--step_time=0.05",
                "--snapshot=" + os.path.join(self.dir, "snapshot.pt")], max_restarts=10,
            extra_env=[{"name": "GLOO_SOCKET_IFNAME", "value": "lo"},
                       # The user's own value wins over the operator's (a cluster DNS name).
                       {"name": "MASTER_ADDR", "value": "127.0.0.1"},
                       {"name": "OMP_NUM_THREADS", "value": "1"}],
            # The killed pod's broken session is the detection; with a 2 s heartbeat timeout a
            # loaded machine once declared a live agent dead (an extra restart).
            spec={"coordination": {"heartbeatIntervalSeconds": 1, "heartbeatTimeoutSeconds": 10}})
        self.assertTrue(harness.eventually(lambda: self.steps() >= 20, TIMEOUT, 0.2),
                        "the workers did not reach step 20; job=%s" % json.dumps(self.job()))
        worker = [e for e in self.task_pod_events("start", 1) if " task=3 " in e]
        self.assertTrue(worker, self.log("%s-task-1-0" % self.JOB))
        started = {p: len(self.task_pod_events("start", p)) for p in (0, 1)}
        os.kill(int(self.field(worker[0], "pid")), signal.SIGKILL)
        # Each agent starts its 2 workers anew. Not "restart=1" on both: as under torchrun, the
        # restart count (TORCHELASTIC_RESTART_COUNT) counts restarts for failed workers only.
        # Agent 1's worker failed; agent 0 restarts either because its workers failed on the lost
        # peer (counted) or because its monitor saw agent 1's request for a new round while its
        # workers were still healthy (not counted): which comes first is the machine's timing.
        restarted = lambda: all(len(self.task_pod_events("start", p)) >= started[p] + 2
                                for p in (0, 1))
        self.assertTrue(harness.eventually(restarted, TIMEOUT, 0.2),
                        "the agents did not restart their workers after a worker died")

        at = self.steps()
        self.assertTrue(harness.eventually(lambda: self.steps() >= at + 20, TIMEOUT, 0.2))
        self.admin("kill-pod", "default/%s-task-1-0" % self.JOB)
        # The coordinator's word reaches agent 0 (its workers may also fail on the lost peer
        # first and restart for that; either way the next round waits for the replacement).
        detected = "phalanx: peer task 1 (incarnation 0) failed: session broken"
        self.assertTrue(
            harness.eventually(lambda: detected in self.log("%s-task-0-0" % self.JOB), TIMEOUT,
                               0.2),
            "agent 0 did not hear of the lost pod from Phalanx:\n%s" % self.log(
                "%s-task-0-0" % self.JOB)[-3000:])

        self.wait_succeeded()
        finals = self.task_pod_events("final")
        last = {}
        for e in finals:
            last[self.field(e, "task")] = e
        self.assertEqual(sorted(last), ["0", "1", "2", "3"], finals)
        self.assertEqual({self.field(e, "steps") for e in last.values()}, {str(self.STEPS)})
        self.assertEqual(len({self.field(e, "params_sha256") for e in last.values()}), 1, finals)
        status = self.job()["status"]
        self.assertEqual(status.get("restarts"), 1, status)  # the killed pod
        sys.stderr.write("job status: %s\n" % json.dumps(status))
        self.passed = True


if __name__ == "__main__":
    unittest.main()
