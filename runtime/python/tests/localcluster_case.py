"""A test case that runs phalanx-localcluster (a real control plane where the envtest assets are
found) and phalanx-operator as real processes, with kubectl, pod logs and job status helpers.
Subclasses set ``JOB`` (the TrainingJob's name) and ``NODES``."""

import glob
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

import harness

sys.path.insert(0, os.path.join(harness.REPO, "tests", "deploy"))
import deploy_test  # noqa: E402 (wait_established: the one Python copy of that wait)

KUBECTL = os.environ.get("KUBECTL", "/usr/bin/kubectl")
CLUSTER = os.path.join(harness.BUILD, "tests", "localcluster", "phalanx-localcluster")
OPERATOR = os.path.join(harness.BUILD, "operator", "phalanx-operator")
COORDINATOR = os.path.join(harness.BUILD, "runtime", "coordination", "phalanx-coordinator")
AGENT = os.path.join(harness.BUILD, "node_agent", "phalanx-agent")
CRD = os.path.join(harness.REPO, "crds", "trainingjobs.phalanx.dev.yaml")


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
class LocalClusterCase(unittest.TestCase):
    JOB = "job"
    NODES = 2
    # With AGENT_GPUS set, one phalanx-agent per node (that many fake GPUs, XIDs scripted through
    # inject_xid, --gpu_failure_policy AGENT_POLICY) serves its clique channel on its node's own
    # address, and the operator wires task pods to it (--agent_clique_port).
    AGENT_GPUS = 0
    AGENT_POLICY = "node"

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="phalanx-py-e2e-")
        self.kubeconfig = os.path.join(self.dir, "kubeconfig")
        self.cluster = self.operator = None
        self.agents = []
        self.logs, self.passed = [], False
        self.addCleanup(self.cleanup)
        self.cluster = start([CLUSTER, "--kubeconfig-out", self.kubeconfig, "--work-dir",
                              os.path.join(self.dir, "cluster"), "--nodes", str(self.NODES)],
                             self.log_file("localcluster.log"))
        self.assertIsNotNone(harness.read_line(self.cluster, "ready ", 120),
                             "phalanx-localcluster did not print ready; see " + self.dir)
        self.kubectl("apply", "-f", CRD)
        deploy_test.wait_established(KUBECTL, self.kubeconfig, "trainingjobs.phalanx.dev")
        port_base = 20000 + random.randrange(5000) * 2  # even, below the ephemeral ports (32768+)
        agent_args = []
        if self.AGENT_GPUS:
            # Each node's agent listens on the node's own loopback address: one port for all.
            self.agent_port = port_base - 1
            agent_args = ["--agent_clique_port", str(self.agent_port)]
            for node in range(self.NODES):
                self.start_agent(node)
        self.operator = start([OPERATOR, "--kubeconfig", self.kubeconfig,
                               "--coordinator_command", COORDINATOR,
                               "--coordinator_address", "pod-ip",
                               "--coordinator_port_base", str(port_base),
                               "--metrics_listen", "127.0.0.1:0", "--lease_namespace", "default"]
                              + agent_args, self.log_file("operator.log"))
        self.assertIsNotNone(harness.read_line(self.operator, "ready ", 30),
                             "phalanx-operator did not print ready; see " + self.dir)

    def node_ip(self, node):
        """The InternalIP of ``node-<node>`` (the local cluster gives each node its own)."""
        internal = 'jsonpath={.status.addresses[?(@.type=="InternalIP")].address}'
        deadline = time.monotonic() + 60
        while True:
            ip = self.kubectl("get", "node", "node-%d" % node, "-o", internal, check=False).strip()
            if ip:
                return ip
            self.assertLess(time.monotonic(), deadline, "node-%d has no InternalIP" % node)
            time.sleep(0.2)

    def xid_file(self, node):
        return os.path.join(self.dir, "xids-node-%d" % node)

    def start_agent(self, node):
        agent = start([AGENT, "--kubeconfig", self.kubeconfig, "--node_name", "node-%d" % node,
                       "--notice_sources=node-taint", "--fake_gpus=%d" % self.AGENT_GPUS,
                       "--fake_xid_file=" + self.xid_file(node),
                       "--gpu_failure_policy=" + self.AGENT_POLICY, "--poll_interval=100ms",
                       "--clique_socket=", "--clique_listen=%s:%d" % (self.node_ip(node),
                                                                      self.agent_port),
                       "--metrics_listen=127.0.0.1:0"], self.log_file("agent-%d.log" % node))
        self.agents.append(agent)
        self.assertIsNotNone(harness.read_line(agent, "ready ", 30),
                             "the agent of node-%d did not print ready; see %s" % (node, self.dir))

    def inject_xid(self, node, gpu, xid):
        """Makes fake GPU ``gpu`` of ``node-<node>`` raise ``xid`` (its agent's next tick)."""
        with open(self.xid_file(node), "a") as f:
            f.write("%d %d\n" % (gpu, xid))

    def cleanup(self):
        stop_group(self.operator)
        for agent in self.agents:
            stop_group(agent)
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
        out = self.kubectl("get", "trainingjobs.phalanx.dev", self.JOB, "-o", "json", check=False)
        try:
            return json.loads(out)
        except ValueError:
            return {}

    def phase(self):
        return self.job().get("status", {}).get("phase", "")

    def wait_succeeded(self, timeout=120):
        self.assertTrue(harness.eventually(lambda: self.phase() == "Succeeded", timeout, 0.5),
                        "job did not succeed: %s" % json.dumps(self.job()))

    def log(self, pod):
        try:
            with open(os.path.join(self.dir, "cluster", "logs", "default_" + pod + ".log")) as f:
                return f.read()
        except FileNotFoundError:
            return ""

    @staticmethod
    def _events_in(text, kind):
        return [line for line in text.splitlines()
                if line.startswith("EVENT ") and re.search(r" kind=%s( |$)" % re.escape(kind), line)]

    def events(self, pod, kind):
        return self._events_in(self.log(pod), kind)

    def task_pod_events(self, kind, index="*"):
        """``kind`` events in the logs of every incarnation of task pod ``index`` (every task pod
        by default), oldest incarnation first by file name."""
        pattern = "default_%s-task-%s-*.log" % (self.JOB, index)
        found = []
        for path in sorted(glob.glob(os.path.join(self.dir, "cluster", "logs", pattern))):
            with open(path) as f:
                found += self._events_in(f.read(), kind)
        return found

    @staticmethod
    def field(line, name):
        m = re.search(r" %s=(\S+)" % re.escape(name), line)
        return m.group(1) if m else None

    def apply_python_job(self, replicas, argv, max_restarts, extra_env=(), spec=None):
        """Applies TrainingJob ``JOB``: ``replicas`` tasks running ``argv`` with this build's
        Python package and library (restartScope Task, a 1-2 s back-off); ``spec`` adds fields."""
        env = [{"name": "PHALANX_LIBRARY", "value": harness.LIBRARY},
               {"name": "PYTHONPATH", "value": harness.PYTHON_DIR},
               {"name": "PYTHONUNBUFFERED", "value": "1"}] + list(extra_env)
        job_spec = {
            "replicas": replicas,
            "failurePolicy": {"maxRestarts": max_restarts, "restartScope": "Task",
                              "backoff": {"baseSeconds": 1, "maxSeconds": 2}},
            "template": {"spec": {
                "terminationGracePeriodSeconds": 1,
                "containers": [{"name": "trainer", "image": "python:3", "command": argv[:1],
                                "args": argv[1:], "env": env}]}}}
        job_spec.update(spec or {})
        job = {"apiVersion": "phalanx.dev/v1alpha1", "kind": "TrainingJob",
               "metadata": {"name": self.JOB, "namespace": "default"}, "spec": job_spec}
        self.kubectl("apply", "-f", "-", stdin=json.dumps(job).encode())

    def admin(self, *args):
        """``phalanx-localcluster admin ARGS`` (kill-pod, stop-pod, preempt-node, ...)."""
        subprocess.run([CLUSTER, "admin", "--kubeconfig", self.kubeconfig] + list(args),
                       check=True, capture_output=True, timeout=30)
