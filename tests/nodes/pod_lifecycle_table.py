#!/usr/bin/env python3
"""The pod-lifecycle differential table (issue 28): the same pods on the process kubelet (the
local cluster's default nodes: a pod's command runs as a local process) and on a real kubelet
v1.28.7 with containerd (the shared real-node cluster, $PHALANX_NODE_CLUSTER), field by field:
phase, the container's terminated state (exit code, reason, FallbackToLogsOnError's message),
restart count and waiting reason, the pod's conditions, the Event reasons, how a delete within
the grace period ends the container.

  pod_lifecycle_table.py SOURCE_DIR BINARY_DIR

Every field must agree, except those KNOWN_DIFFERENCES lists with the reason the process kubelet
cannot follow (as the built-in API server's differential table does): a new difference fails, a
listed one that no longer differs fails too (so the list stays true). Exit 77 when the shared
real-node cluster could not run here.
"""
import json
import os
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import node_test as nt  # noqa: E402

COORDINATOR_ENV = [{"name": "PHALANX_TOKEN", "value": "a-probe-token-not-a-secret"}]
COORDINATOR_ARGS = ["--job", "probe", "--num_tasks", "1", "--listen", "127.0.0.1:0",
                    "--metrics_listen", ""]

# name: (image/binary, args, restartPolicy, what the case does after creating the pod)
CASES = {
    "exits-0": ("phalanx-sample-worker", ["--version"], "Never", "wait-end"),
    "exits-1": ("phalanx-sample-worker", ["--bogus"], "Never", "wait-end"),
    "sigkill": ("phalanx-coordinator", COORDINATOR_ARGS, "Never", "kill"),
    "crash-loop": ("phalanx-sample-worker", ["--bogus"], "Always", "wait-restarts"),
    "delete-in-grace": ("phalanx-coordinator", COORDINATOR_ARGS, "Never", "delete"),
}

# (case or "*", field): why the process kubelet differs. Everything else must be equal.
KNOWN_DIFFERENCES = {
    ("*", "event reasons"): "the process kubelet and the harness's scheduler record no Events "
                            "(a real kube-scheduler records Scheduled, the kubelet Pulled, Created, "
                            "Started, BackOff, Killing)",
}

BINARIES = {"phalanx-sample-worker": "examples/sample_worker/phalanx-sample-worker",
            "phalanx-coordinator": "runtime/coordination/phalanx-coordinator"}


def pod_spec(case, build, real):
    image, args, restart, _ = CASES[case]
    container = {"name": "main", "image": nt.image(image), "imagePullPolicy": "Never",
                 "args": args, "terminationMessagePolicy": "FallbackToLogsOnError"}
    if image == "phalanx-coordinator":
        container["env"] = COORDINATOR_ENV
    if not real:  # the process kubelet runs the command and ignores the image
        container["command"] = [os.path.join(build, BINARIES[image])]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": case},
            "spec": {"restartPolicy": restart, "terminationGracePeriodSeconds": 20,
                     "containers": [container]}}


def observe(c, ns, case):
    p = c.get("pod", case, "-n", ns) or {}
    status = p.get("status", {})
    cs = (status.get("containerStatuses") or [{}])[0]
    state = cs.get("state", {})
    term = state.get("terminated") or cs.get("lastState", {}).get("terminated") or {}
    events = c.get("events", "-n", ns, "--field-selector", f"involvedObject.name={case}") or {}
    return {
        "phase": status.get("phase"),
        "exitCode": term.get("exitCode"),
        "reason": term.get("reason"),
        "message mentions the error": "bogus" in (term.get("message") or ""),
        "restartCount >= 1": cs.get("restartCount", 0) >= 1,
        "waiting": (state.get("waiting") or {}).get("reason"),
        "conditions": ",".join(f"{x['type']}={x['status']}" for x in sorted(
            status.get("conditions", []), key=lambda x: x["type"])),
        "event reasons": ",".join(sorted({e["reason"] for e in events.get("items", [])})),
    }


def run_case(c, ns, case, build, real):
    c.apply(pod_spec(case, build, real), ns)
    action = CASES[case][3]
    if action == "wait-end":
        nt.wait_until(f"{case} ended", lambda: nt.phase(c, ns, case) in ("Succeeded", "Failed"), 90)
    elif action == "wait-restarts":
        # Back-off is a moment between restarts: compare the state as first seen in it.
        def looping():
            o = observe(c, ns, case)
            return o if o["restartCount >= 1"] and o["waiting"] == "CrashLoopBackOff" else None
        seen = nt.wait_until(f"{case} in CrashLoopBackOff", looping, 90)
        time.sleep(1.5)  # the Events of the first restart
        seen["event reasons"] = observe(c, ns, case)["event reasons"]
        return seen
    else:
        nt.wait_until(f"{case} Running", lambda: nt.phase(c, ns, case) == "Running", 90)
        # Ready is set a moment after Running on both kubelets; compare the settled state.
        nt.wait_until(f"{case} Ready", lambda: "Ready=True" in observe(c, ns, case)["conditions"], 30)
        if action == "kill":
            c.admin("kill-pod", f"{ns}/{case}")
            nt.wait_until(f"{case} Failed", lambda: nt.phase(c, ns, case) == "Failed", 60)
        elif action == "delete":
            # What the kubelet wrote before the pod went: how the container ended (on SIGTERM,
            # not by a SIGKILL after the grace period) and the phase, not how long that took on
            # a loaded machine.
            _, gone = c.delete_watched(ns, case)
            t = nt.ended_state(gone) or {}
            return {"delete: exit code": t.get("exitCode"), "delete: reason": t.get("reason"),
                    "delete: phase": gone.get("status", {}).get("phase")}
    time.sleep(1.5)  # let the last status write and Events land on both
    return observe(c, ns, case)


def main():
    src, build = sys.argv[1:3]
    shared = os.environ.get("PHALANX_NODE_CLUSTER", "")
    if os.path.exists(os.path.join(shared, "skip")):
        print(f"SKIP: the real-node cluster cannot run here: {open(os.path.join(shared, 'skip')).read().strip()}")
        return nt.SKIP
    nt.check(os.path.exists(os.path.join(shared, "ready")), f"no shared real-node cluster in {shared!r}")
    real = nt.Cluster(build, os.path.join(shared, "kubeconfig"))
    tmp = tempfile.mkdtemp(prefix="phalanx-pod-table-")
    proc_cluster, log = None, None
    # The process kubelet: the cluster the operator e2e cases share (process nodes on the real
    # 1.26 control plane) when CTest gives it, else one of its own.
    shared_process = os.environ.get("PHALANX_E2E_SHARED_CLUSTER", "")
    try:
        if os.path.exists(os.path.join(shared_process, "ready")):
            process = nt.Cluster(build, os.path.join(shared_process, "kubeconfig"))
        else:
            log = open(os.path.join(tmp, "cluster.log"), "w")
            proc_cluster = subprocess.Popen(
                [real.localcluster, "--kubeconfig-out", os.path.join(tmp, "kubeconfig"),
                 "--work-dir", os.path.join(tmp, "work"), "--nodes", "1", "--nodes-kind", "process"],
                stdout=subprocess.PIPE, stderr=log, text=True)
            line = proc_cluster.stdout.readline()
            nt.check(line.startswith("ready "), f"process-node cluster did not start: {line!r}")
            process = nt.Cluster(build, os.path.join(tmp, "kubeconfig"))
        rows, failures = [], []
        ns_real = real.namespace("pod-table")
        ns_proc = process.namespace("pod-table")
        # Every case on both kubelets at once (independent pods): a few seconds, not minutes.
        results = {False: {}, True: {}}
        errors = []

        def run_one(cluster, ns, case, is_real):
            try:
                results[is_real][case] = run_case(cluster, ns, case, build, real=is_real)
            except nt.Failure as e:
                errors.append(e)
        threads = [threading.Thread(target=run_one, args=(cl, ns, case, is_real))
                   for case in CASES
                   for cl, ns, is_real in ((process, ns_proc, False), (real, ns_real, True))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            raise errors[0]
        for case in CASES:
            got_proc, got_real = results[False][case], results[True][case]
            for field in got_real:
                a, b = got_proc.get(field), got_real.get(field)
                known = KNOWN_DIFFERENCES.get((case, field)) or KNOWN_DIFFERENCES.get(("*", field))
                same = a == b
                rows.append((case, field, a, b, "same" if same else f"differs: {known}" if known
                             else "DIFFERS"))
                if not same and not known:
                    failures.append(f"{case} {field}: process kubelet {a!r}, real kubelet {b!r}")
                if same and known:
                    failures.append(f"{case} {field}: listed as a known difference ({known}) "
                                    "but now agrees: take it off the list")
        real.kubectl("delete", "namespace", ns_real, "--wait=false")
        process.kubectl("delete", "namespace", ns_proc, "--wait=false")
        print(f"{'case':<16} {'field':<38} {'process kubelet':<34} {'real kubelet v1.28.7':<34}")
        for case, field, a, b, verdict in rows:
            print(f"{case:<16} {field:<38} {str(a):<34.34} {str(b):<34.34} {verdict}")
        nt.check(not failures, "\n  ".join(["the kubelets disagree:"] + failures))
    except nt.Failure as e:
        print(f"FAIL (pod lifecycle table): {e}")
        return 1
    finally:
        if proc_cluster is not None:
            proc_cluster.terminate()
            try:
                proc_cluster.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc_cluster.kill()
            log.close()
        subprocess.run(["rm", "-rf", tmp])
    print("PASS (pod lifecycle table)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
