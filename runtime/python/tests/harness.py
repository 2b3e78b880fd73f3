"""Test helpers: the build directory, a real phalanx-coordinator process, bounded waits."""

import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
BUILD = os.environ.get("PHALANX_BUILD_DIR") or os.path.join(REPO, "build")
PYTHON_DIR = os.path.join(REPO, "runtime", "python")
# PHALANX_TEST_INSTALLED=1 (the wheel test): the tests run against a phalanx package installed
# with pip, so nothing here points Python or the dynamic loader into the source or build tree.
INSTALLED = os.environ.get("PHALANX_TEST_INSTALLED") == "1"
if INSTALLED:
    LIBRARY = None
else:
    LIBRARY = os.environ.get("PHALANX_LIBRARY") or os.path.join(BUILD, "runtime", "client",
                                                                "libphalanx_c.so")
    os.environ.setdefault("PHALANX_LIBRARY", LIBRARY)


def package_env():
    """Environment entries that let a child process ``import phalanx``: the source package and
    the built library, or nothing when the tests run against the installed package."""
    if INSTALLED:
        return {}
    return {"PYTHONPATH": PYTHON_DIR, "PHALANX_LIBRARY": LIBRARY}


def use_source_package():
    """Makes ``import phalanx`` in this process find the source package (not when installed)."""
    if not INSTALLED and PYTHON_DIR not in sys.path:
        sys.path.insert(0, PYTHON_DIR)


def require_torch():
    """Imports torch, or exits 77 (CTest: skipped) saying why: Debian's python3-torch installs
    for /usr/bin/python3 only."""
    try:
        import torch  # noqa: F401
    except ImportError as e:
        print("SKIP: torch is not importable by %s (%s); Debian's python3-torch provides it for "
              "/usr/bin/python3" % (sys.executable, e))
        sys.exit(77)


def eventually(predicate, timeout, interval=0.05):
    """Polls ``predicate`` until it is truthy or ``timeout`` seconds pass; returns its value."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() >= deadline:
            return value
        time.sleep(interval)


def read_line(proc, prefix, timeout, log=None):
    """The first line of ``proc.stdout`` starting with ``prefix`` within ``timeout`` seconds,
    or None. Other lines go to ``log`` (a list) when given."""
    found = []

    def reader():
        for raw in proc.stdout:
            line = raw.decode("utf-8", "replace").rstrip("\n")
            if line.startswith(prefix):
                found.append(line)
                return
            if log is not None:
                log.append(line)

    t = threading.Thread(target=reader, daemon=True)
    t.start()
    t.join(timeout)
    return found[0] if found else None


def stop(proc, timeout=10):
    """SIGTERM, then SIGKILL after ``timeout`` seconds; closes its stdout pipe."""
    if proc is None:
        return
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
    if proc.stdout is not None:
        proc.stdout.close()


class Coordinator:
    """A phalanx-coordinator process on 127.0.0.1 (any port) for ``num_tasks`` tasks."""

    def __init__(self, num_tasks=2, job="pyjob", token="secret-token", heartbeat_timeout="5s",
                 extra_args=()):
        self.job, self.token, self.num_tasks = job, token, num_tasks
        self.dir = tempfile.mkdtemp(prefix="phalanx-py-coord-")
        self.token_file = os.path.join(self.dir, "token")
        with open(self.token_file, "w") as f:
            f.write(token + "\n")
        self.stderr = open(os.path.join(self.dir, "coordinator.log"), "wb")
        self.args = ["--metrics_listen=", "--job=" + job, "--num_tasks=%d" % num_tasks,
                     "--token_file=" + self.token_file, "--heartbeat_timeout=" + heartbeat_timeout,
                     "--heartbeat_interval=200ms"] + list(extra_args)
        self._start("127.0.0.1:0")

    def _start(self, listen):
        binary = os.path.join(BUILD, "runtime", "coordination", "phalanx-coordinator")
        self.proc = subprocess.Popen([binary, "--listen=" + listen] + self.args,
                                     stdout=subprocess.PIPE, stderr=self.stderr)
        line = read_line(self.proc, "ready ", 20)
        if line is None:
            stop(self.proc)
            raise RuntimeError("phalanx-coordinator did not print ready; see %s" % self.dir)
        self.address = line.split("grpc=")[1].split()[0]
        # "127.0.0.1:PORT" when started with --metrics_listen=127.0.0.1:0, else "".
        self.metrics_address = line.split("metrics=")[1].split()[0] if "metrics=" in line else ""

    def metric(self, name):
        """The value of the unlabelled series ``name`` on /metrics (needs metrics_address)."""
        with urllib.request.urlopen("http://%s/metrics" % self.metrics_address, timeout=10) as r:
            for line in r.read().decode().splitlines():
                if line.startswith(name + " "):
                    return float(line.split()[1])
        return None

    def restart(self, downtime=0.0, kill=False):
        """Stops the coordinator with SIGTERM (a graceful stop, as a pod eviction does; SIGKILL
        with ``kill``, a crash), waits ``downtime`` seconds, and starts a new one on the same
        address: it knows nothing of the old one's state."""
        if kill and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        stop(self.proc)
        time.sleep(downtime)
        self._start(self.address)

    def env(self, task_id, incarnation=0, token=None):
        """The PHALANX_* environment the operator would inject for ``task_id``."""
        return {"PHALANX_COORDINATOR": self.address, "PHALANX_JOB": self.job,
                "PHALANX_TASK_ID": str(task_id), "PHALANX_NUM_TASKS": str(self.num_tasks),
                "PHALANX_INCARNATION": str(incarnation),
                "PHALANX_TOKEN": self.token if token is None else token}

    def spare_env(self, pod="spare-0"):
        """The environment the operator injects into a spare pod (spec.spares): no task identity,
        the job's spare credential."""
        env = self.env(0)
        del env["PHALANX_TASK_ID"], env["PHALANX_INCARNATION"]
        env.update(PHALANX_SPARE="0", PHALANX_POD_NAME=pod,
                   PHALANX_TOKEN=spare_credential(self.token))
        return env

    def close(self):
        stop(self.proc)
        self.stderr.close()
        shutil.rmtree(self.dir, ignore_errors=True)


def spare_credential(token, slot=0):
    """The job's spare credential, as the operator derives it (common/auth/credentials.h)."""
    import hashlib
    import hmac
    mac = hmac.new(token.encode(), ("phalanx/spare/v1/%d" % slot).encode(), hashlib.sha256)
    return "spare.%d.%s" % (slot, mac.hexdigest())


class Agent:
    """A phalanx-agent process (no Kubernetes) with ``gpus`` fake GPUs, its clique registry on
    127.0.0.1 (any port: :attr:`address`, what a task gets as ``PHALANX_CLIQUE_ADDRESS``) and
    XIDs scripted through :meth:`inject_xid`."""

    def __init__(self, directory, gpus=4):
        self.xid_file = os.path.join(directory, "xids")
        self.log = open(os.path.join(directory, "agent.log"), "wb")
        binary = os.path.join(BUILD, "node_agent", "phalanx-agent")
        self.proc = subprocess.Popen(
            [binary, "--kube=false", "--notice_sources=", "--node_name=test-node",
             "--fake_gpus=%d" % gpus, "--fake_xid_file=" + self.xid_file, "--clique_socket=",
             "--clique_listen=127.0.0.1:0", "--metrics_listen=127.0.0.1:0",
             "--poll_interval=100ms"], stdout=subprocess.PIPE, stderr=self.log)
        line = read_line(self.proc, "ready ", 20)
        if line is None or "clique_port=" not in line:
            stop(self.proc)
            raise RuntimeError("phalanx-agent did not print its clique port; see %s" % directory)
        self.address = "127.0.0.1:" + line.split("clique_port=")[1].split()[0]

    def inject_xid(self, gpu, xid):
        with open(self.xid_file, "a") as f:
            f.write("%d %d\n" % (gpu, xid))

    def close(self):
        stop(self.proc)
        self.log.close()
