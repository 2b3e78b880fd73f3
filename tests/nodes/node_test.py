#!/usr/bin/env python3
"""Phalanx on real nodes (issue 28): real kubelets v1.28.7 with containerd, placed by
kube-scheduler, as `phalanx-localcluster --nodes-kind real` runs them (CTest label `node`).

  node_test.py SOURCE_DIR BINARY_DIR CASE

CASE install and kubelet run on the cluster the `node` cases share (CTest fixture
real_node_cluster, started by tests/e2e/shared_cluster.sh; its folder in
$PHALANX_NODE_CLUSTER), each in namespaces of its own:

  install   as a user installs: `helm install` of deploy/helm/phalanx with the images of
            `make images` (operator Deployment with leader election, one agent per node with its
            init container), examples/trainingjob.yaml (coordinator and 4 tasks as containers,
            through cluster DNS), a task's process SIGKILLed in its container (the replacement
            Running, status.restarts 1), a task pod deleted (its PID 1 ends on SIGTERM: gone well
            within the grace period), `helm uninstall` (nothing left in the release namespace).
  kubelet   what only a real kubelet does, each beside what the process kubelet reports for the
            same case where it can: exit codes and FallbackToLogsOnError's message, 137 for a
            SIGKILLed container, SIGTERM on delete (our PID 1 ends at once), runAsNonRoot with the
            image's user, restricted Pod Security; with the harness's testbox image, OOMKilled
            under a memory limit and SIGKILL after the grace period for a PID 1 that ignores
            SIGTERM.
  torch     examples/trainingjob-torch.yaml as containers of the PyTorch worker image
            (`make torch-image`: Debian's python3 + python3-torch + the wheel; skipped without
            it): a task's container SIGKILLed mid-run, the survivors recover in place, and every
            task's final parameters are bitwise those of the undisturbed run (torch_train.py
            --reference on this machine's PyTorch, which the image holds).
  faults    a cluster of its own, started after the shared one stopped (a second start on the
            machine), takes the faults a cloud deals out, with Phalanx installed by helm:
            `preempt-node` (the agent, reading only the node's GCE metadata server, announces
            the preemption; the node's pods are evicted), a node lost (its kubelet stopped: the
            real node-lifecycle controller marks it NotReady, taints it unreachable and evicts
            its pods; --node-lost-after 8) and that node back. Then the janitor: the harness
            SIGKILLed with Phalanx and pods running, and nothing of it is left on the machine
            (processes, mounts, cgroups, bridges, iptables chains).

Exit 77 (skipped) with the reason when this machine cannot run real nodes (root, containerd,
runc, CNI plugins, ../shared/kubernetes-v1.28.7) or `make images` cannot build the images.
"""
import base64
import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "deploy"))
import deploy_test  # noqa: E402 (Failure, check, run, wait_until, find_helm: the chart tests' helpers)
from deploy_test import Failure, check, run, wait_until  # noqa: E402
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "prometheus"))
import kube_sd  # noqa: E402 (the chart's monitors as scrape jobs, and the discovery)
import live_prometheus  # noqa: E402 (a real Prometheus, and the dashboard and alert checks)

SKIP = 77


class Cluster:
    def __init__(self, build, kubeconfig):
        self.build = build
        self.kubeconfig = kubeconfig
        self.kubectl_bin = os.path.join(build, "kubernetes-v1.28.7", "kubectl")  # 1.28 against 1.28
        self.localcluster = os.path.join(build, "tests", "localcluster", "phalanx-localcluster")

    def kubectl(self, *args, timeout=60, check_rc=True, stdin=None):
        r = run([self.kubectl_bin, "--kubeconfig", self.kubeconfig, *args], timeout=timeout,
                input=stdin)
        if check_rc:
            check(r.returncode == 0, f"kubectl {' '.join(args)}: {r.stderr.strip()}")
        return r

    def get(self, *args):
        r = self.kubectl("get", *args, "-o", "json", check_rc=False)
        return json.loads(r.stdout) if r.returncode == 0 else None

    def apply(self, obj, ns=None):
        extra = ["-n", ns] if ns else []
        return self.kubectl("apply", *extra, "-f", "-", stdin=json.dumps(obj))

    def admin(self, *args):
        r = run([self.localcluster, "admin", "--kubeconfig", self.kubeconfig, *args])
        check(r.returncode == 0, f"admin {' '.join(args)}: {r.stderr.strip()}")

    def delete_watched(self, ns, name, timeout=90):
        """Deletes pod `name` while watching it: (seconds until it was gone, the pod as it was
        last, with the status the kubelet wrote before it went). The kubelet writes how the
        container ended before the pod goes, so how a delete ended a pod (SIGTERM honoured, or
        SIGKILL after the grace period) is read from its exit code (ended_state), not inferred
        from how long it took on a loaded machine."""
        watch = subprocess.Popen(
            [self.kubectl_bin, "--kubeconfig", self.kubeconfig, "get", "pod", name, "-n", ns,
             "--watch", "--output-watch-events", "-o", "json"],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        try:
            decoder, text, events = json.JSONDecoder(), "", []
            deadline = time.monotonic() + timeout

            def next_event():
                nonlocal text
                while True:
                    stripped = text.lstrip()
                    if stripped:
                        try:
                            event, end = decoder.raw_decode(stripped)
                            text = stripped[end:]
                            return event
                        except json.JSONDecodeError:
                            pass
                    left = deadline - time.monotonic()
                    check(left > 0, f"pod {ns}/{name} was not gone within {timeout}s")
                    if select.select([watch.stdout], [], [], left)[0]:
                        chunk = os.read(watch.stdout.fileno(), 65536)
                        check(chunk, f"the watch on pod {ns}/{name} ended before the pod did")
                        text += chunk.decode()

            events.append(next_event())  # the pod as it is: watching before the delete
            t0 = time.monotonic()
            self.kubectl("delete", "pod", "-n", ns, name, "--wait=false")
            while events[-1].get("type") != "DELETED":
                events.append(next_event())
            took = time.monotonic() - t0
        finally:
            watch.kill()
            watch.wait()
        return took, events[-1].get("object", {})

    def namespace(self, prefix, labels=None):
        name = f"{prefix}-{os.getpid()}"
        obj = {"apiVersion": "v1", "kind": "Namespace",
               "metadata": {"name": name, "labels": labels or {}}}
        self.apply(obj)
        wait_until(f"default ServiceAccount in {name}",
                   lambda: self.get("serviceaccount", "default", "-n", name), 30)
        return name


def phase(cluster, ns, pod):
    p = cluster.get("pod", pod, "-n", ns)
    return p["status"].get("phase") if p else None


def terminated(cluster, ns, pod):
    return ended_state(cluster.get("pod", pod, "-n", ns), last_too=True)


def ended_state(p, last_too=False):
    """The first container's terminated state in pod object `p` (or its last one: last_too)."""
    for s in (p or {}).get("status", {}).get("containerStatuses", []):
        t = s.get("state", {}).get("terminated") or (
            last_too and s.get("lastState", {}).get("terminated"))
        if t:
            return t
    return None


def image(name):
    return f"ghcr.io/phalanx-dev/{name}:0.1.0"


def restricted_container(name, img, args):
    return {"name": name, "image": img, "imagePullPolicy": "Never", "args": args,
            "securityContext": {"allowPrivilegeEscalation": False, "runAsNonRoot": True,
                                "capabilities": {"drop": ["ALL"]},
                                "seccompProfile": {"type": "RuntimeDefault"}}}


def pod(name, containers, **spec):
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"restartPolicy": "Never", "containers": containers, **spec}}


# ---------------------------------------------------------------------------------------------

class Watching:
    """Issue 32 (1): Debian's Prometheus scraping the installed chart as its ServiceMonitors and
    PodMonitor say (rendered by helm with both on and 2 s intervals; tests/prometheus/kube_sd.py
    turns them into scrape jobs and stands in for the Kubernetes discovery Debian's build
    lacks), with the shipped alert rules loaded. Nothing when prometheus is not installed."""

    def __init__(self, c, src, helm):
        self.prom = self.targets = self.dir = None
        try:
            self._start(c, src, helm)
        except BaseException:
            self.stop()
            raise

    def _start(self, c, src, helm):
        if shutil.which("prometheus") is None:
            print("prometheus is not installed: no live scrape (apt-get install prometheus)")
            return
        import yaml
        r = run([helm, "template", "phalanx", os.path.join(src, "deploy", "helm", "phalanx"),
                 "--namespace", "phalanx-system", "--set", "agent.fakeGpus=2",
                 "--set", "monitoring.serviceMonitor.enabled=true",
                 "--set", "monitoring.podMonitor.enabled=true",
                 "--set", "monitoring.serviceMonitor.interval=2s",
                 "--set", "monitoring.podMonitor.interval=2s"], timeout=60)
        check(r.returncode == 0, f"helm template: {r.stderr}")
        monitors = [d for d in yaml.safe_load_all(r.stdout)
                    if d and d.get("kind") in ("ServiceMonitor", "PodMonitor")]
        check(len(monitors) == 3, f"the chart renders {len(monitors)} monitors, not 3")
        self.dir = tempfile.mkdtemp(prefix="phalanx-node-prometheus-")
        self.targets = kube_sd.KubeTargets(
            lambda: c.get("pods,endpoints,services", "-A")["items"], self.dir)
        prom = live_prometheus.LivePrometheus(
            self.dir, kube_sd.scrape_configs(monitors, self.dir),
            os.path.join(src, "deploy", "alerts", "phalanx-rules.yaml"))
        self.prom = prom.__enter__()  # stops its process itself if it never became ready
        self.started = time.monotonic()

    def check(self, c, src, ns, job):
        """Every target the chart names is up; the job's phase series is its status.phase; every dashboard query returns data (or has a
        reason not to); every alert evaluates, and none fires that should not."""
        if self.prom is None:
            return
        wanted = {"phalanx-operator": 1, "phalanx-agent": 2, "phalanx-coordinator": 1}
        wait_until("Prometheus finds the operator, both agents and the coordinator up",
                   lambda: all(self.prom.targets_up().get(job, []).count("up") >= n
                               for job, n in wanted.items()), 60)
        # What the operator says of the job is what the job says (sampled every 5 s).
        def same_phase():
            phase = (c.get("trainingjob", job, "-n", ns) or {}).get("status", {}).get("phase")
            seen = self.prom.query(
                f'phalanx_operator_job_phase{{namespace="{ns}",trainingjob="{job}"}} == 1')
            return phase and [r["metric"].get("phase") for r in seen] == [phase] and phase
        phase = wait_until(f"Prometheus shows {ns}/{job} in the phase its status has",
                           same_phase, 30)
        # The counters the dashboard's panels read tell what happened: the kill is a restart,
        # the scheduler took two tasks (their first events included: a series born at 1 would
        # hide it from increase()).
        def counted():
            got = {}
            for metric in ("phalanx_operator_task_restarts_total",
                           "phalanx_operator_preemptions_total"):
                r = self.prom.query(f"sum(increase({metric}[10m]))")
                got[metric] = float(r[0]["value"][1]) if r else 0.0
            return got if (got["phalanx_operator_task_restarts_total"] >= 0.99 and
                           got["phalanx_operator_preemptions_total"] >= 1.98) else None
        counts = wait_until("Prometheus counts the kill's restart and the two preemptions",
                            counted, 30)
        # rate() over the dashboard's windows needs two samples of each series.
        time.sleep(max(0.0, 6 - (time.monotonic() - self.started)))
        dashboard_file = os.path.join(src, "deploy", "dashboards", "phalanx.json")
        with open(dashboard_file) as f:
            dashboard = json.load(f)
        problems, report = live_prometheus.dashboard_problems(self.prom, dashboard)
        # A job that just went through a kill, a hang and a preemption in a minute may well
        # have a goodput under 80 % (pending: it fires after 30 min), and one of its pods may
        # be on its way back (Restarting: pending for 15 min); nothing may fire.
        alert_issues, alerts = live_prometheus.alert_problems(
            self.prom, {"PhalanxGoodputLow", "PhalanxJobStuckRestarting"}, allow_inactive=True)
        print(f"prometheus: {sum(len(v) for v in self.prom.targets_up().values())} targets up; "
              f"the job {phase} in both; increase() of restarts "
              f"{counts['phalanx_operator_task_restarts_total']:.2f}, of preemptions "
              f"{counts['phalanx_operator_preemptions_total']:.2f}; dashboard queries "
              f"(series each):")
        for line in report:
            print("  " + line)
        print("  alerts: " + ", ".join(alerts))
        check(not problems and not alert_issues,
              "live Prometheus:\n  " + "\n  ".join(problems + alert_issues))
        # The dashboard as a picture (docs/operations.md shows one), on request: drawing costs.
        png = os.environ.get("PHALANX_DASHBOARD_PNG")
        if png:
            r = run([sys.executable, os.path.join(src, "tests", "prometheus", "render_panels.py"),
                     self.prom.url(""), dashboard_file, png, "--minutes",
                     f"{max(0.5, (time.monotonic() - self.started) / 60 + 0.1):.2f}"],
                    timeout=180)
            print((r.stdout + r.stderr).strip())

    def stop(self):
        if self.targets is not None:
            self.targets.stop()
        if self.prom is not None:
            self.prom.__exit__(None, None, None)
        if self.dir is not None:
            shutil.rmtree(self.dir, ignore_errors=True)


def clique_line(address, line):
    """One request to a node agent's clique channel; its one-line answer."""
    host, port = address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=5) as s:
        s.sendall(line.encode() + b"\n")
        answer = b""
        while not answer.endswith(b"\n"):
            chunk = s.recv(4096)
            if not chunk:
                break
            answer += chunk
    return answer.decode().strip()


def clique_channel_takes_only_tickets(c, ns, release_ns):
    """Issue 30 item 6 on real nodes: the agent (chart defaults) has the key the operator wrote
    and takes a claim on task 0 only with task 0's ticket (from the job's Secret, as the pod
    mounts it), not with a made-up key or another task's ticket."""
    key = c.get("secret", "phalanx-agent-clique-key", "-n", release_ns)
    check(key and key.get("data", {}).get("key"), "the operator wrote the agents' clique key")
    data = c.get("secret", "sample-token", "-n", ns)["data"]
    ticket = {i: base64.b64decode(data[f"task-{i}-clique"]).decode() for i in (0, 1)}
    task = c.get("pod", "sample-task-0-0", "-n", ns)
    env = {e["name"]: e.get("value") for e in task["spec"]["containers"][0]["env"]}
    check(env.get("PHALANX_CLIQUE_TICKET_FILE") == "/var/run/phalanx/clique/ticket-0",
          f"task 0's pod is told where its ticket is: {env.get('PHALANX_CLIQUE_TICKET_FILE')}")
    node = task["spec"]["nodeName"]
    agent = [p for p in c.get("pods", "-n", release_ns, "-l",
                              "app.kubernetes.io/component=agent")["items"]
             if p["spec"]["nodeName"] == node][0]
    address = f"{agent['status']['podIP']}:8479"
    # Incarnation 0, the task's own, so the real task's entries stay (a newer incarnation's
    # report would drop them); the probe's entry expires with the agent's TTL.
    line = "REPORT job=sample task=0 inc=0 clique=probe state=READY devices=0 key="
    # The kubelet fills in the optional Secret volume once the operator has written it.
    wait_until("the agent verifies tickets with its key", lambda: clique_line(
        address, line + ticket[0]) == "OK", 90)
    for name, bad in (("a made-up key", "made-up"), ("task 1's ticket", ticket[1])):
        answer = clique_line(address, line + bad)
        check(answer.startswith("ERR permission denied"), f"{name} claimed task 0: {answer}")
    print(f"clique channel on {node}: only task 0's ticket claims task 0 (a made-up key and "
          "task 1's ticket refused)")


def case_install(src, cluster, helm):
    c = cluster
    release_ns = "phalanx-system"
    c.kubectl("apply", "--server-side", "-f", os.path.join(src, "crds"))
    nodes = c.get("nodes")["items"]
    t0 = time.monotonic()
    r = run([helm, "install", "phalanx", os.path.join(src, "deploy", "helm", "phalanx"),
             "--kubeconfig", c.kubeconfig, "--namespace", release_ns, "--create-namespace",
             "--set", "agent.fakeGpus=2", "--wait", "--timeout", "180s"], timeout=240)
    check(r.returncode == 0, f"helm install: {r.stderr}")
    print(f"helm install --wait: {time.monotonic() - t0:.1f}s")
    watching = None
    try:
        watching = Watching(c, src, helm)
        ds = c.get("daemonset", "-n", release_ns, "-l", "app.kubernetes.io/component=agent")["items"]
        check(len(ds) == 1, "one agent DaemonSet")
        wait_until("an agent Ready on every node", lambda: c.get(
            "daemonset", ds[0]["metadata"]["name"], "-n", release_ns)["status"].get(
                "numberReady") == len(nodes), 120)
        agents = c.get("pods", "-n", release_ns, "-l", "app.kubernetes.io/component=agent")["items"]
        check(sorted(p["spec"]["nodeName"] for p in agents) == sorted(
            n["metadata"]["name"] for n in nodes), "one agent per node")
        for p in agents:
            init = p["status"]["initContainerStatuses"][0]["state"].get("terminated", {})
            check(init.get("exitCode") == 0, f"the agent's init container ended {init}")
        leases = c.get("leases", "-n", release_ns)["items"]
        check(any(lease["spec"].get("holderIdentity") for lease in leases),
              "the operator holds its leader-election Lease")
        print(f"operator and {len(agents)} agents Running as containers; leader elected")

        ns = c.namespace("nodes-install")
        # The example as users write it, with a PriorityClass of its own (for the scheduler's
        # preemption below: two classes, the job's the lower).
        for name, value in PRIORITY_CLASSES.items():
            c.apply({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                     "metadata": {"name": name}, "value": value,
                     "description": "node_install: training tasks and what preempts them"})
        example = json.loads(c.kubectl("create", "--dry-run=client", "-o", "json", "-f",
                                       os.path.join(src, "examples", "trainingjob.yaml")).stdout)
        example["spec"]["priorityClassName"] = LOW_PRIORITY
        example["metadata"].pop("namespace", None)  # kubectl create filled in its default
        t0 = time.monotonic()
        c.apply(example, ns)

        def running():
            pods = c.get("pods", "-n", ns)["items"]
            up = [p for p in pods if p["status"].get("phase") == "Running" and all(
                s.get("ready") for s in p["status"].get("containerStatuses", []))]
            return len(up) >= 5 and up
        wait_until("the example's coordinator and 4 tasks Running and ready", running, 180)
        print(f"examples/trainingjob.yaml: coordinator + 4 tasks ready {time.monotonic() - t0:.1f}s "
              "after apply")

        clique_channel_takes_only_tickets(c, ns, release_ns)

        victim = "sample-task-1-0"
        t0 = time.monotonic()
        c.admin("kill-pod", f"{ns}/{victim}")
        t = wait_until("the killed task's container terminated", lambda: terminated(c, ns, victim), 60)
        check(t.get("exitCode") == 137, f"SIGKILLed container exit code {t}")
        wait_until("the job restarted the task (status.restarts 1) with 4 tasks Running", lambda: (
            (c.get("trainingjob", "sample", "-n", ns) or {}).get("status", {}).get("restarts", 0) >= 1
            and len([p for p in c.get("pods", "-n", ns, "-l", "phalanx.dev/role=task")["items"]
                     if p["status"].get("phase") == "Running"
                     and not p["metadata"].get("deletionTimestamp")]) >= 4), 120)
        print(f"kill -9 in the container -> replacement Running {time.monotonic() - t0:.1f}s later")

        scheduler_preempts(c, ns)
        watching.check(c, src, ns, "sample")

        task = [p for p in c.get("pods", "-n", ns, "-l", "phalanx.dev/role=task")["items"]
                if p["status"].get("phase") == "Running"][0]
        grace = task["spec"].get("terminationGracePeriodSeconds", 30)
        took, gone = c.delete_watched(ns, task["metadata"]["name"], timeout=120)
        t = ended_state(gone)
        print(f"task pod deleted (grace {grace}s): {(t or {}).get('exitCode')} "
              f"{(t or {}).get('reason')}, gone in {took:.1f}s")
        check(t is not None and t.get("exitCode") != 137,
              f"the task's PID 1 did not end on SIGTERM (SIGKILLed after its {grace}s grace "
              f"period): {t}")
        c.kubectl("delete", "namespace", ns, "--wait=true", timeout=180)
        placement_keeps_a_job_in_one_domain(c, example)
    finally:
        if watching is not None:
            watching.stop()
        for name in PRIORITY_CLASSES:
            c.kubectl("delete", "priorityclass", name, "--ignore-not-found", check_rc=False)
        r = run([helm, "uninstall", "phalanx", "--kubeconfig", c.kubeconfig, "--namespace",
                 release_ns, "--wait", "--timeout", "120s"], timeout=180)
    check(r.returncode == 0, f"helm uninstall: {r.stderr}")

    def left():
        out = []
        for kind in ["deployments", "daemonsets", "pods", "leases", "secrets", "services",
                     "serviceaccounts", "configmaps", "roles", "rolebindings"]:
            for o in c.get(kind, "-n", release_ns)["items"]:
                name = o["metadata"]["name"]
                if (kind, name) not in {("configmaps", "kube-root-ca.crt"),
                                        ("serviceaccounts", "default")}:
                    out.append(f"{kind}/{name}")
        return out
    try:
        wait_until("nothing left in the release namespace", lambda: not left(), 60)
    except Failure:
        raise Failure(f"helm uninstall left {left()}")
    print("helm uninstall: nothing left in phalanx-system but kube-root-ca.crt and the default "
          "ServiceAccount")
    # The agents got SIGTERM after their RBAC was gone: that is an uninstall, not every node
    # shutting down (they used to taint every node phalanx.dev/preempting, for good).
    time.sleep(2)
    tainted = [f"{n['metadata']['name']}: {t['key']}" for n in c.get("nodes")["items"]
               for t in n["spec"].get("taints", []) if t["key"].startswith("phalanx.dev/")]
    check(not tainted, f"helm uninstall left Phalanx taints on nodes: {tainted}")


RACK = "node-test.phalanx.dev/rack"


def placement_diagnosis(c, ns):
    """What the placed job's pods, the job and the nodes' GPUs looked like, for a failure."""
    pods = c.get("pods", "-n", ns) or {"items": []}
    parts = []
    for p in pods["items"]:
        waiting = [f"{x.get('reason')}: {x.get('message', '')}"
                   for x in p["status"].get("conditions", []) if x.get("status") == "False"]
        parts.append(f"{p['metadata']['name']} {p['status'].get('phase')} on "
                     f"{p['spec'].get('nodeName', '-')} {waiting}")
    job = c.get("trainingjob", "placed", "-n", ns) or {}
    conditions = [f"{x['type']}={x['status']} {x.get('message', '')}"
                  for x in job.get("status", {}).get("conditions", [])]
    gpus = {n["metadata"]["name"]: n["status"].get("allocatable", {}).get("nvidia.com/gpu")
            for n in (c.get("nodes") or {"items": []})["items"]}
    everywhere = c.get("pods", "-A", "--field-selector=status.phase!=Succeeded") or {"items": []}
    holding = [f"{p['metadata']['namespace']}/{p['metadata']['name']} on "
               f"{p['spec'].get('nodeName')}" for p in everywhere["items"]
               if any("nvidia.com/gpu" in (k.get("resources", {}).get("limits") or {})
                      for k in p["spec"].get("containers", []))]
    return (f"pods: {parts}; job conditions: {conditions}; allocatable GPUs: {gpus}; "
            f"pods asking for GPUs: {holding}")


def placement_keeps_a_job_in_one_domain(c, example):
    """Issue 31 (4), with the real kube-scheduler: each node is a rack of its own. A 2-task job
    (1 GPU each) with spec.placement {topologyKey: rack, exclusive} has both tasks on one node,
    where the scheduler's default scoring (least allocated) would spread them; a second job
    pinned to that node stays Pending, and its Unschedulable condition carries the scheduler's
    word for why (the first job's anti-affinity)."""
    nodes = sorted(n["metadata"]["name"] for n in c.get("nodes")["items"])
    ns = c.namespace("nodes-placement")
    try:
        for i, node in enumerate(nodes):
            c.kubectl("label", "node", node, f"{RACK}=r{i}", "--overwrite")

        def job(name, replicas, **extra):
            j = json.loads(json.dumps(example))
            j["metadata"]["name"] = name
            j["spec"].pop("priorityClassName", None)
            j["spec"]["replicas"] = replicas
            worker = j["spec"]["template"]["spec"]["containers"][0]
            worker["args"] = [a if not a.startswith("--steps=") else "--steps=3000"
                              for a in worker["args"]]
            worker["resources"]["limits"]["nvidia.com/gpu"] = 1
            j["spec"].update(extra)
            return j
        t0 = time.monotonic()
        c.apply(job("placed", 2, placement={"topologyKey": RACK, "exclusive": True}), ns)

        def both_running():
            pods = [p for p in c.get("pods", "-n", ns, "-l", "phalanx.dev/job=placed,"
                                     "phalanx.dev/role=task")["items"]
                    if p["status"].get("phase") == "Running"]
            return len(pods) == 2 and pods
        try:
            pods = wait_until("the placed job's 2 tasks Running", both_running, 120)
        except Failure as e:
            # Once under a parallel load (stop 50): say what stood in the way next time.
            try:
                why = placement_diagnosis(c, ns)
            except Exception as d:  # the diagnosis must not hide the failure
                why = f"(no diagnosis: {d!r})"
            raise Failure(f"{e}; {why}")
        where = sorted(p["spec"]["nodeName"] for p in pods)
        check(where[0] == where[1], f"spec.placement: the tasks went to {where}, not one rack")
        print(f"placement: both tasks on {where[0]} ({RACK}) {time.monotonic() - t0:.1f}s after "
              "apply")
        outsider = job("outsider", 1)
        outsider["spec"]["template"]["spec"]["nodeSelector"] = {"kubernetes.io/hostname": where[0]}
        c.apply(outsider, ns)

        def refused():
            conditions = (c.get("trainingjob", "outsider", "-n", ns) or {}).get(
                "status", {}).get("conditions", [])
            return next((x["message"] for x in conditions if x["type"] == "Unschedulable"
                         and x["status"] == "True"), None)
        message = wait_until("the outsider job Unschedulable", refused, 90)
        check("anti-affinity" in message,
              f"the outsider's Unschedulable message does not name the anti-affinity: {message}")
        print(f"exclusive: a job pinned to {where[0]} waits: {message}")
    finally:
        c.kubectl("delete", "namespace", ns, "--wait=true", timeout=180, check_rc=False)
        for node in nodes:
            c.kubectl("label", "node", node, f"{RACK}-", check_rc=False)


LOW_PRIORITY = f"phalanx-node-test-training-{os.getpid()}"
HIGH_PRIORITY = f"phalanx-node-test-urgent-{os.getpid()}"
PRIORITY_CLASSES = {LOW_PRIORITY: 100, HIGH_PRIORITY: 1000000}


def scheduler_preempts(c, ns):
    """Issue 31 (5): the real kube-scheduler preempts a node's two tasks (2 GPUs each, the job's
    spec.priorityClassName: 100) for a pod of a higher PriorityClass that needs all 4 of the
    node's GPUs. The scheduler marks them DisruptionTarget (PreemptionByScheduler) and deletes
    them; the operator takes that for a preemption (a checkpoint round, status.preemptions, not
    status.restarts), and their replacements wait until the GPUs are free again."""
    job = lambda: c.get("trainingjob", "sample", "-n", ns)["status"]  # noqa: E731
    before = job()
    tasks = [p for p in c.get("pods", "-n", ns, "-l", "phalanx.dev/role=task")["items"]
             if p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")]
    check(all(p["spec"].get("priorityClassName") == LOW_PRIORITY and p["spec"].get("priority") == 100
              for p in tasks), "the task pods do not carry the job's priorityClassName")
    node = tasks[0]["spec"]["nodeName"]
    victims = sorted(p["metadata"]["name"] for p in tasks if p["spec"]["nodeName"] == node)
    hog = pod("gpu-hog", [{"name": "hog", "image": "localhost/phalanx-testbox:1",
                           "imagePullPolicy": "Never", "args": ["ignore-sigterm"],
                           "resources": {"limits": {"nvidia.com/gpu": 4}}}],
              priorityClassName=HIGH_PRIORITY, terminationGracePeriodSeconds=1,
              nodeSelector={"kubernetes.io/hostname": node})
    t0 = time.monotonic()
    try:
        c.apply(hog, ns)
        wait_until("the high-priority pod Running on the tasks' node",
                   lambda: phase(c, ns, "gpu-hog") == "Running", 120)
        took = time.monotonic() - t0
        # The operator books the moves once it has seen the victims go (it may lag the hog); a
        # restart instead would be the bug, so either ends the wait and the check says which.
        def booked():
            s = job()
            moved = s.get("preemptions", 0) >= before.get("preemptions", 0) + len(victims)
            return s if moved or s.get("restarts") != before.get("restarts") else None
        st = wait_until("the operator booked the victims", booked, 60)
        check(st.get("preemptions", 0) >= before.get("preemptions", 0) + len(victims) and
              st.get("restarts") == before.get("restarts"),
              f"scheduler preemption of {victims}: preemptions {before.get('preemptions', 0)} -> "
              f"{st.get('preemptions')}, restarts {before.get('restarts')} -> {st.get('restarts')}")
        events = c.get("events", "-n", ns, "--field-selector", "involvedObject.name=sample")
        reasons = {e["reason"] for e in events["items"]}
        check("TaskPreempted" in reasons, f"no TaskPreempted Event: {sorted(reasons)}")
        notices = [e["message"] for e in events["items"] if e["reason"] == "PreemptionNotice"]
        check(any("PreemptionByScheduler" in m for m in notices),
              f"no PreemptionNotice names the scheduler's preemption: {notices}")
        print(f"kube-scheduler preempted {victims} (priority 100) on {node} for a "
              f"priority-1000000 pod: hog Running {took:.1f}s after apply; preemptions {st.get('preemptions')}, "
              f"restarts {st.get('restarts')}; job Events {sorted(reasons)}")
        for e in events["items"]:
            if e["reason"] in ("PreemptionNotice", "CheckpointRoundOpened", "TaskPreempted"):
                print(f"  {e['reason']}: {e['message']}")
    finally:
        c.kubectl("delete", "pod", "-n", ns, "gpu-hog", "--wait=true", timeout=60, check_rc=False)

    def four_running():
        pods = c.get("pods", "-n", ns, "-l", "phalanx.dev/role=task")["items"]
        return len([p for p in pods if p["status"].get("phase") == "Running"
                    and not p["metadata"].get("deletionTimestamp")]) >= 4
    wait_until("the replacements Running once the GPUs are free", four_running, 120)


def case_kubelet(src, cluster):
    c = cluster
    build = c.build
    ns = c.namespace("nodes-kubelet", {"pod-security.kubernetes.io/enforce": "restricted"})
    worker = os.path.join(build, "examples", "sample_worker", "phalanx-sample-worker")
    table = []

    # 1. An exit code, and FallbackToLogsOnError's message: the same as the process itself.
    local = run([worker, "--bogus"])
    spec = pod("bad-flag", [{**restricted_container("w", image("phalanx-sample-worker"), ["--bogus"]),
                             "terminationMessagePolicy": "FallbackToLogsOnError"}])
    c.apply(spec, ns)
    t = wait_until("bad-flag terminated", lambda: terminated(c, ns, "bad-flag"), 90)
    check(t["exitCode"] == local.returncode,
          f"exit code {t['exitCode']} on the real kubelet, {local.returncode} as a process")
    wait_until("a non-zero exit with restartPolicy Never is Failed",
               lambda: phase(c, ns, "bad-flag") == "Failed", 30)
    check("bogus" in t.get("message", ""), f"FallbackToLogsOnError message: {t.get('message')!r}")
    table.append(("exit code, FallbackToLogsOnError", f"{t['exitCode']}, {t['message'].strip()!r}"))

    # 2. A long-running PID 1 (the coordinator) under restricted Pod Security and runAsNonRoot
    #    with the image's user; SIGKILL from the runtime is 137; SIGTERM on delete ends it at once.
    for name in ["coord-kill", "coord-term"]:
        container = restricted_container("c", image("phalanx-coordinator"),
                                         ["--job", "probe", "--num_tasks", "1"])
        container["env"] = [{"name": "PHALANX_TOKEN", "value": "a-probe-token-not-a-secret"}]
        spec = pod(name, [container], terminationGracePeriodSeconds=30)
        c.apply(spec, ns)
    for name in ["coord-kill", "coord-term"]:
        wait_until(f"{name} Running", lambda n=name: phase(c, ns, n) == "Running", 90)
    table.append(("runAsNonRoot with the image's user, restricted PSA", "Running"))
    c.admin("kill-pod", f"{ns}/coord-kill")
    t = wait_until("coord-kill terminated", lambda: terminated(c, ns, "coord-kill"), 60)
    check(t["exitCode"] == 137 and t.get("reason") == "Error", f"SIGKILLed: {t}")
    table.append(("kill-pod (SIGKILL in the container)", f"{t['exitCode']} {t['reason']}"))
    # How the container ended says which signal did it: the coordinator ends on SIGTERM (0 as
    # PID 1, whom the re-raised signal cannot kill; 143 elsewhere), 137 would be the SIGKILL
    # after the grace period.
    took, gone = c.delete_watched(ns, "coord-term")
    t = ended_state(gone)
    check(t is not None and t.get("exitCode") in (0, 143),
          f"the coordinator as PID 1 did not end on SIGTERM: {t} ({took:.1f}s, grace 30 s)")
    table.append(("delete, grace 30 s (SIGTERM to PID 1)",
                  f"{t['exitCode']} {t.get('reason')}: gone in {took:.1f}s"))

    # 3. Restricted Pod Security refuses a privileged pod (the API server, before any kubelet).
    bad = pod("privileged", [{"name": "c", "image": image("phalanx-coordinator"),
                              "imagePullPolicy": "Never", "securityContext": {"privileged": True}}])
    r = c.kubectl("apply", "-n", ns, "-f", "-", stdin=json.dumps(bad), check_rc=False)
    check(r.returncode != 0 and "restricted" in r.stderr, f"a privileged pod was admitted: {r.stderr}")
    table.append(("privileged pod in a restricted namespace", "refused"))

    # 4. The downward API: the node's name and address in the pod's environment are the
    #    node's own (the kubelet fills status.hostIP with its --node-ip).
    p = c.get("pod", "bad-flag", "-n", ns)
    node = c.get("node", p["spec"]["nodeName"])
    addresses = [a["address"] for a in node["status"]["addresses"] if a["type"] == "InternalIP"]
    check(p["status"].get("hostIP") in addresses, f"hostIP {p['status'].get('hostIP')} vs {addresses}")
    table.append(("status.hostIP", p["status"]["hostIP"]))

    # 5. What needs a program that misbehaves on purpose (the harness's testbox image: one
    #    static binary, user 65532): OOMKilled under a memory limit, and SIGKILL after the grace
    #    period for a PID 1 that ignores SIGTERM.
    testbox = "localhost/phalanx-testbox:1"
    hog = restricted_container("hog", testbox, ["eat-memory", "512"])
    hog["resources"] = {"limits": {"memory": "64Mi"}}
    c.apply(pod("oom", [hog]), ns)
    c.apply(pod("deaf", [restricted_container("deaf", testbox, ["ignore-sigterm"])],
                terminationGracePeriodSeconds=4), ns)
    t = wait_until("oom terminated", lambda: terminated(c, ns, "oom"), 90)
    check(t.get("reason") == "OOMKilled" and t.get("exitCode") == 137, f"over its limit: {t}")
    table.append(("512 MiB under a 64Mi limit", f"{t['exitCode']} {t['reason']}"))
    wait_until("deaf Running", lambda: "ready" in c.kubectl(
        "logs", "-n", ns, "deaf", check_rc=False).stdout, 90)
    # SIGKILL (137) after the grace period: never before it; how long after is the machine's.
    took, gone = c.delete_watched(ns, "deaf")
    t = ended_state(gone)
    check(t is not None and t.get("exitCode") == 137 and took >= 4,
          f"SIGTERM ignored, grace 4 s: ended {t} after {took:.1f}s")
    table.append(("delete, grace 4 s, SIGTERM ignored",
                  f"{t['exitCode']} {t.get('reason')}: gone in {took:.1f}s"))
    c.kubectl("delete", "namespace", ns, "--wait=false")
    print("real kubelet v1.28.7:")
    for what, seen in table:
        print(f"  {what:<55} {seen}")


def case_torch(src, cluster, helm):
    c = cluster
    images = os.path.join(c.build, "images")
    if not any(f.startswith("phalanx-torch-worker-") for f in os.listdir(images)):
        print(f"SKIP: no phalanx-torch-worker image in {images} (make torch-image builds it from "
              "this machine's Debian packages, ~1 GB)")
        return SKIP
    ns = c.namespace("nodes-torch")
    # An operator of its own that watches only this namespace (no agents: node_install's
    # release owns those; CTest's lock keeps the two apart).
    c.kubectl("apply", "--server-side", "-f", os.path.join(src, "crds"))
    r = run([helm, "install", "phalanx-torch", os.path.join(src, "deploy", "helm", "phalanx"),
             "--kubeconfig", c.kubeconfig, "--namespace", ns, "--set", f"operator.watchNamespace={ns}",
             "--set", "agent.enabled=false", "--wait", "--timeout", "180s"], timeout=240)
    check(r.returncode == 0, f"helm install: {r.stderr}")
    try:
        run_torch_job(src, c, ns)
    finally:
        run([helm, "uninstall", "phalanx-torch", "--kubeconfig", c.kubeconfig, "--namespace", ns,
             "--wait", "--timeout", "120s"], timeout=180)
        c.kubectl("delete", "namespace", ns, "--wait=false", check_rc=False)


def run_torch_job(src, c, ns):
    steps = 300
    with open(os.path.join(src, "examples", "trainingjob-torch.yaml")) as f:
        text = f.read()
    # The image's /tmp is writable by its user; a real cluster mounts a shared volume there.
    text = text.replace("--steps=300", f"--steps={steps}").replace("/ckpt/torch", "/tmp/ckpt")
    t0 = time.monotonic()
    c.kubectl("apply", "-n", ns, "-f", "-", stdin=text)

    def log(pod_name):
        r = c.kubectl("logs", "-n", ns, pod_name, check_rc=False)
        return r.stdout if r.returncode == 0 else ""

    def step_of(pod_name):
        steps_seen = [int(line.split(" step=")[1].split()[0]) for line in log(pod_name).splitlines()
                      if " kind=step " in line]
        return max(steps_seen, default=0)

    def pod_of(task):
        """Task `task`'s newest pod, by its labels: a task pod, or the spare pod that took the
        task over (relabelled; spec.spares)."""
        pods = (c.get("pods", "-n", ns, "-l", f"phalanx.dev/job=torch,phalanx.dev/task={task}")
                or {}).get("items", [])
        newest = max(pods, default=None,
                     key=lambda p: int(p["metadata"]["labels"]["phalanx.dev/incarnation"]))
        return newest["metadata"]["name"] if newest else ""

    def spares_ready():
        job = c.get("trainingjob", "torch", "-n", ns) or {}
        return job.get("status", {}).get("spares", {}).get("ready", 0) >= 1
    wait_until("task 2 at step 20", lambda: step_of("torch-task-2-0") >= 20, 240)
    print(f"PyTorch job training as containers ({time.monotonic() - t0:.1f}s after apply)")
    # The example asks for a spare pod: it waits warm in phalanx.init() (torch imported).
    wait_until("the spare pod waits for a task", spares_ready, 180)
    c.admin("kill-pod", f"{ns}/torch-task-2-0")
    wait_until("the group re-formed with task 2's replacement",
               lambda: pod_of(2) not in ("", "torch-task-2-0") and
               " kind=formed " in log(pod_of(2)), 180)
    replacement = pod_of(2)
    check("-spare-" in replacement,
          f"task 2 was replaced by {replacement}, not by the waiting spare pod")
    wait_until("the job Succeeded", lambda: (c.get("trainingjob", "torch", "-n", ns) or {}).get(
        "status", {}).get("phase") in ("Succeeded", "Failed"), 300)
    phase = c.get("trainingjob", "torch", "-n", ns)["status"]["phase"]
    check(phase == "Succeeded", f"the PyTorch job ended {phase}")
    ref = run(["/usr/bin/python3", os.path.join(src, "runtime", "python", "examples", "torch_train.py"),
               f"--steps={steps}", "--step_time=0.05", "--reference=4"], timeout=300,
              env={**os.environ, "PYTHONPATH": os.path.join(src, "runtime", "python")})
    reference = ref.stdout.strip().splitlines()[-1].split("params_sha256=")[1].split()[0]
    for t in range(4):
        last = pod_of(t)
        finals = [line for line in log(last).splitlines() if " kind=final " in line]
        check(finals, f"task {t} ({last}) printed no final parameters")
        got = finals[0].split("params_sha256=")[1].split()[0]
        check(got == reference, f"task {t}: final parameters {got[:16]} != undisturbed {reference[:16]}")
    print(f"PyTorch on real nodes: a SIGKILLed task was taken over by spare pod {replacement} "
          f"and recovered in place; all 4 tasks' final "
          f"parameters equal the undisturbed run's ({reference[:16]}...), "
          f"{time.monotonic() - t0:.1f}s")


def host_leftovers(work):
    out = []
    ps = run(["ps", "-eo", "pid,args"]).stdout.splitlines()
    out += [f"process {line.strip()[:100]}" for line in ps if f"{work}/nodes/" in line]
    with open("/proc/self/mounts") as f:
        out += [f"mount {line.split()[1]}" for line in f if line.split()[1].startswith(work + "/")]
    for h in os.listdir("/sys/fs/cgroup"):
        path = os.path.join("/sys/fs/cgroup", h)
        if os.path.isdir(path):
            out += [f"cgroup {h}/{d}" for d in os.listdir(path) if d.startswith("phalanx-node-")]
    out += [f"link {n}" for n in os.listdir("/sys/class/net") if n.startswith("phx-node")]
    for table in ["nat", "filter"]:
        rules = run(["iptables", "-t", table, "-S"]).stdout.splitlines()
        out += [f"iptables {table} {r[:80]}" for r in rules if "KUBE-" in r or "CNI-" in r]
    return out


def start_cluster(build, work, images_dir, *flags):
    cluster_bin = os.path.join(build, "tests", "localcluster", "phalanx-localcluster")
    os.makedirs(work, exist_ok=True)
    log = open(os.path.join(work, "cluster.log"), "w")
    p = subprocess.Popen([cluster_bin, "--kubeconfig-out", os.path.join(work, "kubeconfig"),
                          "--work-dir", work, "--nodes-kind", "real", "--nodes", "1",
                          "--images", images_dir, *flags],
                         stdout=subprocess.PIPE, stderr=log, text=True)
    line = p.stdout.readline()
    if not line.startswith("ready "):
        p.wait(timeout=30)
        with open(os.path.join(work, "cluster.log")) as f:
            tail = f.read()[-2000:]
        if p.returncode == 3:
            raise SystemExit(print(f"SKIP: {tail.strip().splitlines()[-1]}") or SKIP)
        raise Failure(f"real-node cluster did not start ({p.returncode}):\n{tail}")
    print(f"real-node cluster: {line.strip()}")
    return p


def sleeper(name, node):
    return pod(name, [{"name": "p", "image": "localhost/phalanx-pause:1",
                       "imagePullPolicy": "Never"}], nodeName=node)


def fault_story(src, build, helm, harness, kubeconfig):
    """Phalanx installed on a 2-node cluster (node lost after 8 s), then preempt-node, a node
    lost and back."""
    c = Cluster(build, kubeconfig)
    c.kubectl("apply", "--server-side", "-f", os.path.join(src, "crds"))
    # The agent with the gce notice source only, reading its node's metadata server: a notice
    # it announces came from there.
    r = run([helm, "install", "phalanx", os.path.join(src, "deploy", "helm", "phalanx"),
             "--kubeconfig", c.kubeconfig, "--namespace", "phalanx-system", "--create-namespace",
             "--set", "agent.fakeGpus=2", "--set", "agent.noticeSources=gce",
             "--set", "agent.gceMetadataUrl=http://$(HOST_IP)", "--wait", "--timeout", "180s"],
            timeout=240)
    check(r.returncode == 0, f"helm install: {r.stderr}")
    for node in ["node-0", "node-1"]:
        c.apply(sleeper(f"on-{node}", node), "default")
        wait_until(f"a pod Running on {node}", lambda n=node: phase(
            c, "default", f"on-{n}") == "Running", 90)

    # preempt-node: the metadata notice (read by the agent), the taint, then the eviction.
    t0 = time.monotonic()
    c.admin("preempt-node", "node-0", "--grace-seconds", "3")

    def notice():
        events = c.get("events", "-A", "--field-selector",
                       "involvedObject.kind=Node,involvedObject.name=node-0,reason=PreemptionNotice")
        return [e["message"] for e in (events or {}).get("items", [])]
    messages = wait_until("the agent's PreemptionNotice for node-0", notice, 60)
    check(any("from gce-metadata" in m for m in messages), f"notice events: {messages}")
    print(f"preempt-node: the agent read the metadata notice in {time.monotonic() - t0:.1f}s: "
          f"{messages[0]!r}")
    wait_until("the preempted node's pod evicted",
               lambda: c.get("pod", "on-node-0", "-n", "default") is None, 60)
    taints = [t["key"] for t in c.get("node", "node-0")["spec"].get("taints", [])]
    check("cloud.google.com/impending-node-termination" in taints, f"node-0 taints: {taints}")
    check(harness.poll() is None, "the harness died during preempt-node")
    print(f"preempt-node: taint, then the pod evicted through the Eviction API "
          f"({time.monotonic() - t0:.1f}s)")

    # A node lost: its kubelet stopped; the real node-lifecycle controller takes over.
    t0 = time.monotonic()
    c.admin("node-not-ready", "node-1")

    def ready(node):
        conditions = c.get("node", node)["status"].get("conditions", [])
        return next((x["status"] for x in conditions if x["type"] == "Ready"), None)
    wait_until("node-1 NotReady (status Unknown: no kubelet answers)",
               lambda: ready("node-1") == "Unknown", 60)
    lost = time.monotonic() - t0
    wait_until("node-1 tainted node.kubernetes.io/unreachable:NoExecute", lambda: any(
        (t["key"], t["effect"]) == ("node.kubernetes.io/unreachable", "NoExecute")
        for t in c.get("node", "node-1")["spec"].get("taints", [])), 30)
    wait_until("node-1's pod evicted by the taint manager", lambda: (c.get(
        "pod", "on-node-1", "-n", "default") or {}).get("metadata", {}).get("deletionTimestamp"),
        60)
    print(f"node lost: NotReady after {lost:.1f}s, its pod evicted after "
          f"{time.monotonic() - t0:.1f}s (--node-lost-after 8)")
    c.admin("node-ready", "node-1")
    wait_until("node-1 Ready again", lambda: ready("node-1") == "True", 60)
    wait_until("the evicted pod gone once its kubelet is back",
               lambda: c.get("pod", "on-node-1", "-n", "default") is None, 60)
    print(f"node back: Ready, the evicted pod deleted ({time.monotonic() - t0:.1f}s)")



def case_faults(src, build):
    helm = deploy_test.find_helm(src)
    if helm is None:
        return SKIP
    # The shared cluster's stop (SIGTERM, CTest's RealNodeCluster.Stop, which this case runs
    # after) left nothing on the machine.
    can = run([os.path.join(build, "tests", "localcluster", "phalanx-localcluster"), "check",
               "--nodes-kind", "real"])
    if can.returncode == 3:
        print(f"SKIP: {(can.stdout + can.stderr).strip().splitlines()[-1]}")
        return SKIP
    shared = os.environ.get("PHALANX_NODE_CLUSTER", "")
    if shared:  # shared_cluster.sh ran it with --work-dir DIR/cluster (and removed DIR on stop)
        left = host_leftovers(os.path.join(shared, "cluster"))
        check(not left, "left after the shared cluster's stop: " + "\n  ".join(left))
        print("the shared cluster's stop (SIGTERM) left nothing on the machine")
    tmp = tempfile.mkdtemp(prefix="phalanx-node-faults-")
    # A start after the shared cluster's stop (so a second start on this machine), with
    # Phalanx's images (not the PyTorch worker: 476 MB) and a node lost after 8 s instead of
    # 40 s + 300 s.
    images = os.path.join(tmp, "images")
    os.makedirs(images)
    built = os.path.join(build, "images")
    for f in os.listdir(built):
        if f.endswith(".oci.tar") and not f.startswith("phalanx-torch-worker"):
            os.symlink(os.path.join(built, f), os.path.join(images, f))
    work = os.path.join(tmp, "cluster")
    harness = start_cluster(build, work, images, "--nodes", "2", "--gpus-per-node", "2",
                            "--node-labels", "nvidia.com/gpu.present=true",
                            "--node-lost-after", "8")
    try:
        fault_story(src, build, helm, harness, os.path.join(work, "kubeconfig"))
        # The janitor: the harness SIGKILLed with Phalanx and pods running on both nodes.
        check(host_leftovers(work), "a running node shows on the machine (the check sees it)")
    finally:  # a failed case must not leave its cluster running: the next start would skip
        harness.send_signal(signal.SIGKILL)
        harness.wait()
    t0 = time.monotonic()
    try:
        wait_until("the janitor undid the SIGKILLed cluster's host changes",
                   lambda: not host_leftovers(work), 60)
    except Failure:
        raise Failure("left after SIGKILL: " + "\n  ".join(host_leftovers(work)))
    print(f"SIGKILL with Phalanx and pods running: the machine clean "
          f"{time.monotonic() - t0:.1f}s later")
    run(["rm", "-rf", tmp])


def main():
    if len(sys.argv) != 4:
        print(__doc__)
        return 2
    src, build, case = sys.argv[1:]
    try:
        if case == "faults":
            if case_faults(src, build) == SKIP:
                return SKIP
        else:
            shared = os.environ.get("PHALANX_NODE_CLUSTER", "")
            skip = os.path.join(shared, "skip")
            if os.path.exists(skip):
                print(f"SKIP: the real-node cluster cannot run here: {open(skip).read().strip()}")
                return SKIP
            check(os.path.exists(os.path.join(shared, "ready")),
                  f"no shared real-node cluster in {shared!r} (CTest fixture real_node_cluster)")
            cluster = Cluster(build, os.path.join(shared, "kubeconfig"))
            images = os.path.join(build, "images")
            if not any(f.endswith(".oci.tar") for f in os.listdir(images) if os.path.isdir(images)):
                print(f"SKIP: no images in {images} (`make images` / images_run did not build them)")
                return SKIP
            if case == "install":
                helm = deploy_test.find_helm(src)
                if helm is None:
                    return SKIP
                case_install(src, cluster, helm)
            elif case == "kubelet":
                case_kubelet(src, cluster)
            elif case == "torch":
                helm = deploy_test.find_helm(src)
                if helm is None or case_torch(src, cluster, helm) == SKIP:
                    return SKIP
            else:
                print(f"unknown case {case}")
                return 2
    except Failure as e:
        print(f"FAIL ({case}): {e}")
        return 1
    print(f"PASS ({case})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
