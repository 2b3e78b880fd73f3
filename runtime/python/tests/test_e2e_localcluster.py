"""End to end on the local cluster: the Python JAX-style example as the tasks of a TrainingJob.

phalanx-localcluster, phalanx-operator, the job's phalanx-coordinator pod and two Python
tasks (examples/jax_style_train.py over libphalanx_c.so) run as real processes. Once task 1
has checkpointed its process is killed; the operator starts incarnation 1, which resumes from
its checkpoint; the job succeeds and both tasks end in the same model state.
"""

import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

sys.path.insert(0, os.path.join(harness.PYTHON_DIR, "examples"))
import jax_style_train  # noqa: E402

KUBECTL = os.environ.get("KUBECTL", "/usr/bin/kubectl")
CLUSTER = os.path.join(harness.BUILD, "tests", "localcluster", "phalanx-localcluster")
OPERATOR = os.path.join(harness.BUILD, "operator", "phalanx-operator")
COORDINATOR = os.path.join(harness.BUILD, "runtime", "coordination", "phalanx-coordinator")
EXAMPLE = os.path.join(harness.PYTHON_DIR, "examples", "jax_style_train.py")
CRD = os.path.join(harness.REPO, "crds", "trainingjobs.phalanx.dev.yaml")
JOB = "pytrain"


def start(argv, log):
    """A process in its own session (so its whole group can be killed) whose stdout is a pipe
    and stderr goes to the open file ``log``."""
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=log, start_new_session=True)


def stop_group(proc):
    if proc is None:
        return
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(proc.pid, 9)
            except ProcessLookupError:
                pass
            proc.wait(5)
    if proc.stdout is not None:
        proc.stdout.close()


@unittest.skipUnless(os.path.exists(KUBECTL), "kubectl is not installed at " + KUBECTL)
class LocalClusterE2eTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="phalanx-py-e2e-")
        self.kubeconfig = os.path.join(self.dir, "kubeconfig")
        self.cluster = self.operator = None
        self.logs, self.passed = [], False
        self.addCleanup(self.cleanup)
        self.cluster = start([CLUSTER, "--kubeconfig-out", self.kubeconfig, "--work-dir",
                              os.path.join(self.dir, "cluster"), "--nodes", "2"],
                             self.log_file("localcluster.log"))
        self.assertIsNotNone(harness.read_line(self.cluster, "ready ", 120),
                             "phalanx-localcluster did not print ready; see " + self.dir)
        self.kubectl("apply", "-f", CRD)
        # A real API server serves the resource once the CRD is Established (polled: `kubectl
        # wait --for condition=...` fails outright while status.conditions is still empty).
        established = 'jsonpath={.status.conditions[?(@.type=="Established")].status}'
        deadline = time.monotonic() + 60
        while self.kubectl("get", "crd", "trainingjobs.phalanx.dev", "-o", established,
                           check=False).strip() != "True":
            self.assertLess(time.monotonic(), deadline, "the TrainingJob CRD is not Established")
            time.sleep(0.2)
        port_base = 20000 + random.randrange(5000) * 2  # even, below the ephemeral ports (32768+)
        self.operator = start([OPERATOR, "--kubeconfig", self.kubeconfig,
                               "--coordinator_command", COORDINATOR,
                               "--coordinator_address", "pod-ip",
                               "--coordinator_port_base", str(port_base),
                               "--metrics_listen", "127.0.0.1:0", "--lease_namespace", "default"],
                              self.log_file("operator.log"))
        self.assertIsNotNone(harness.read_line(self.operator, "ready ", 30),
                             "phalanx-operator did not print ready; see " + self.dir)

    def cleanup(self):
        stop_group(self.operator)
        stop_group(self.cluster)
        for f in self.logs:
            f.close()
        if not self.passed:
            sys.stderr.write("e2e artifacts kept in %s\n" % self.dir)
        else:
            shutil.rmtree(self.dir, ignore_errors=True)

    def log_file(self, name):
        f = open(os.path.join(self.dir, name), "wb")
        self.logs.append(f)
        return f

    def kubectl(self, *args, stdin=None, check=True):
        out = subprocess.run([KUBECTL, "--kubeconfig", self.kubeconfig, "--cache-dir",
                              os.path.join(self.dir, "kubectl-cache"), "--request-timeout", "20s"]
                             + list(args), input=stdin, capture_output=True, timeout=30)
        if check and out.returncode != 0:
            self.fail("kubectl %s: %s%s" % (" ".join(args), out.stdout.decode(),
                                             out.stderr.decode()))
        return out.stdout.decode()

    def job(self):
        out = self.kubectl("get", "trainingjobs.phalanx.dev", JOB, "-o", "json", check=False)
        try:
            return json.loads(out)
        except ValueError:
            return {}

    def phase(self):
        return self.job().get("status", {}).get("phase", "")

    def log(self, pod):
        try:
            with open(os.path.join(self.dir, "cluster", "logs", "default_" + pod + ".log")) as f:
                return f.read()
        except FileNotFoundError:
            return ""

    def events(self, pod, kind):
        return [line for line in self.log(pod).splitlines()
                if line.startswith("EVENT ") and re.search(r" kind=%s( |$)" % re.escape(kind), line)]

    @staticmethod
    def field(line, name):
        m = re.search(r" %s=(\S+)" % re.escape(name), line)
        return m.group(1) if m else None

    def create_job(self):
        env = [{"name": "PHALANX_LIBRARY", "value": harness.LIBRARY},
               {"name": "PYTHONPATH", "value": harness.PYTHON_DIR},
               {"name": "PYTHONUNBUFFERED", "value": "1"}]
        job = {
            "apiVersion": "phalanx.dev/v1alpha1", "kind": "TrainingJob",
            "metadata": {"name": JOB, "namespace": "default"},
            "spec": {
                "replicas": 2,
                "failurePolicy": {"maxRestarts": 3, "restartScope": "Task",
                                  "backoff": {"baseSeconds": 1, "maxSeconds": 2}},
                "template": {"spec": {
                    "terminationGracePeriodSeconds": 1,
                    "containers": [{
                        "name": "trainer", "image": "python:3",
                        "command": [sys.executable, EXAMPLE],
                        "args": ["--steps=150", "--step_time=0.04", "--checkpoint_every=10",
                                 "--checkpoint_dir=" + os.path.join(self.dir, "ckpt")],
                        "env": env}]}}}}
        self.kubectl("apply", "-f", "-", stdin=json.dumps(job).encode())

    def test_killed_python_task_resumes_from_its_checkpoint_and_the_job_succeeds(self):
        self.create_job()
        pod0, pod1, pod1_next = JOB + "-task-0-0", JOB + "-task-1-0", JOB + "-task-1-1"

        # Task 1 has trained and checkpointed at least once (step 10 at the earliest).
        self.assertTrue(harness.eventually(lambda: self.events(pod1, "checkpoint"), 30, 0.2),
                        "no checkpoint from %s; phase=%s\n%s" % (pod1, self.phase(),
                                                                  self.log(pod1)))
        subprocess.run([CLUSTER, "admin", "--kubeconfig", self.kubeconfig, "kill-pod",
                        "default/" + pod1], check=True, capture_output=True, timeout=30)

        # The operator replaces only task 1, with incarnation 1, which resumes from a checkpoint.
        self.assertTrue(harness.eventually(lambda: self.events(pod1_next, "start"), 30, 0.2),
                        "%s never started; job=%s" % (pod1_next, json.dumps(self.job())))
        start = self.events(pod1_next, "start")[0]
        self.assertEqual(self.field(start, "inc"), "1", start)
        self.assertGreater(int(self.field(start, "resume_step")), 0, start)

        self.assertTrue(harness.eventually(lambda: self.phase() == "Succeeded", 40, 0.5),
                        "job did not succeed: %s\n%s\n%s" % (
                            json.dumps(self.job()), self.log(pod0), self.log(pod1_next)))

        # The survivor was never restarted: it recovered in place to the same step.
        self.assertEqual(self.log(JOB + "-task-0-1"), "")
        recovered = self.events(pod0, "recovered")
        self.assertTrue(recovered, self.log(pod0))
        self.assertEqual(self.field(recovered[-1], "resume_step"), self.field(start, "resume_step"))
        done0, done1 = self.events(pod0, "done"), self.events(pod1_next, "done")
        self.assertTrue(done0 and done1, self.log(pod0) + self.log(pod1_next))
        self.assertEqual(self.field(done0[0], "steps"), "150")
        self.assertEqual(self.field(done0[0], "state"), self.field(done1[0], "state"))
        state = 0  # what an uninterrupted run ends with
        for step in range(150):
            state = jax_style_train.advance_state(state, step)
        self.assertEqual(self.field(done0[0], "state"), "%016x" % state)
        status = self.job()["status"]
        self.assertEqual(status.get("restarts"), 1, status)
        self.assertEqual([t.get("incarnation") for t in status.get("tasks", [])], [0, 1], status)
        self.passed = True


if __name__ == "__main__":
    unittest.main()
