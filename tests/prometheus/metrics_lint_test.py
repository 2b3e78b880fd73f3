#!/usr/bin/env python3
"""Every component's /metrics as Prometheus reads it: `promtool check metrics` (names, units,
`_total` on counters, help text) on what the running programs serve.

  metrics_lint_test.py SOURCE_DIR BUILD_DIR

Starts a coordinator (its own job), the local cluster with the built-in API server (one node),
an agent on that node (two fake GPUs) and the operator with one TrainingJob applied (so that its
per-job series exist), reads each /metrics and lints it. Bounded: every wait has a deadline and
every process is stopped at the end, also on failure.

Exit 0 pass, 1 fail, 77 skipped (no promtool: `apt-get install prometheus`).
"""
import os
import select
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request

SKIP = 77
TOKEN = "0123456789abcdef0123456789abcdef"


class Failure(Exception):
    pass


def start(argv, log, env=None):
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=open(log, "w"), text=True,
                            env=dict(os.environ, **(env or {})), start_new_session=True)


def ready_line(proc, prefix, timeout, log):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if select.select([proc.stdout], [], [], 0.5)[0]:
            line = proc.stdout.readline()
            if not line:
                break
            if line.startswith(prefix):
                return line.strip()
    raise Failure(f"{proc.args[0]} did not print {prefix!r} within {timeout} s; its log "
                  f"{log}:\n" + open(log).read()[-2000:])


def metrics_port(line):
    return int(line.split("metrics=127.0.0.1:")[1].split()[0])


def get_metrics(port):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        return r.read().decode()


def lint(name, text):
    r = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True,
                       text=True, timeout=60)
    families = sum(1 for line in text.splitlines() if line.startswith("# TYPE "))
    if r.returncode != 0:
        print(f"{name}: promtool check metrics:\n{r.stdout}{r.stderr}")
        return [f"{name}: promtool check metrics found problems"]
    print(f"{name}: {families} families, promtool check metrics clean")
    return []


def main():
    src, build = sys.argv[1], sys.argv[2]
    if shutil.which("promtool") is None:
        print("skipped: promtool is not installed (apt-get install prometheus; "
              "scripts/install-deps.sh installs it)")
        return SKIP
    kubectl = shutil.which("kubectl")
    procs, failures = [], []
    # The lint can fail: a counter without `_total` is refused.
    if not lint("a planted counter without _total",
                "# HELP phalanx_planted_errors Planted.\n# TYPE phalanx_planted_errors counter\n"
                "phalanx_planted_errors 1\n"):
        failures.append("promtool check metrics took a counter without _total")
    tmp = tempfile.mkdtemp(prefix="phalanx-metrics-lint-")
    try:
        coordinator = start([os.path.join(build, "runtime/coordination/phalanx-coordinator"),
                             "--job", "lint", "--num_tasks", "2", "--listen", "127.0.0.1:0",
                             "--metrics_listen", "127.0.0.1:0"],
                            os.path.join(tmp, "coordinator.log"), {"PHALANX_TOKEN": TOKEN})
        procs.append(coordinator)
        line = ready_line(coordinator, "ready ", 30, os.path.join(tmp, "coordinator.log"))
        failures += lint("phalanx-coordinator", get_metrics(metrics_port(line)))

        kubeconfig = os.path.join(tmp, "kubeconfig")
        cluster = start([os.path.join(build, "tests/localcluster/phalanx-localcluster"),
                         "--backend", "builtin", "--nodes", "1", "--kubeconfig-out", kubeconfig,
                         "--work-dir", os.path.join(tmp, "cluster")],
                        os.path.join(tmp, "localcluster.log"))
        procs.append(cluster)
        ready_line(cluster, "ready ", 60, os.path.join(tmp, "localcluster.log"))

        agent = start([os.path.join(build, "node_agent/phalanx-agent"), "--kubeconfig",
                       kubeconfig, "--node_name", "node-0", "--fake_gpus", "2",
                       "--clique_socket", os.path.join(tmp, "cliques.sock"),
                       "--metrics_listen", "127.0.0.1:0"], os.path.join(tmp, "agent.log"))
        procs.append(agent)
        line = ready_line(agent, "ready ", 30, os.path.join(tmp, "agent.log"))
        failures += lint("phalanx-agent", get_metrics(metrics_port(line)))

        operator = start([os.path.join(build, "operator/phalanx-operator"), "--kubeconfig",
                          kubeconfig, "--metrics_listen", "127.0.0.1:0", "--lease_namespace",
                          "default", "--coordinator_command",
                          os.path.join(build, "runtime/coordination/phalanx-coordinator")],
                         os.path.join(tmp, "operator.log"))
        procs.append(operator)
        port = metrics_port(ready_line(operator, "ready ", 30, os.path.join(tmp, "operator.log")))
        if kubectl:
            # One job, so that the per-job series (sampled every 5 s) are linted too.
            for manifest in ("crds/trainingjobs.phalanx.dev.yaml", "examples/trainingjob.yaml"):
                r = subprocess.run([kubectl, "--kubeconfig", kubeconfig, "apply", "-f",
                                    os.path.join(src, manifest)], capture_output=True, text=True,
                                   timeout=60)
                if r.returncode != 0:
                    raise Failure(f"kubectl apply -f {manifest}: {r.stdout}{r.stderr}")
            deadline = time.monotonic() + 60
            text = get_metrics(port)
            while "phalanx_operator_job_phase{" not in text:
                if time.monotonic() > deadline:
                    raise Failure("the operator's per-job series did not appear in 60 s")
                time.sleep(0.5)
                text = get_metrics(port)
        else:
            print("kubectl is not installed: the operator is linted without a job")
            text = get_metrics(port)
        failures += lint("phalanx-operator", text)
    except Failure as e:
        failures.append(str(e))
    finally:
        for p in reversed(procs):
            if p.poll() is None:
                os.killpg(p.pid, 15)
        for p in procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, 9)
                p.wait()
    for f in failures:
        print("FAIL:", f)
    if not failures:
        shutil.rmtree(tmp, ignore_errors=True)
    else:
        print("logs:", tmp)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
