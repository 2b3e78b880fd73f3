#!/usr/bin/env python3
"""`helm install` for real onto a real control plane, then the operator under the chart's RBAC.

  helm_install_test.py SOURCE_DIR BINARY_DIR

1. phalanx-localcluster --backend real (etcd + kube-apiserver + kube-controller-manager; exit 77
   when no control-plane assets exist here).
2. `helm install` of deploy/helm/phalanx into phalanx-system (not --dry-run): the release Secret,
   the CRD, RBAC, ServiceAccounts, the operator Deployment (replicas 0: the operator runs below as a
   local process, since pods here are processes without a ServiceAccount token volume) and the
   agent DaemonSet; `helm status` says deployed.
3. A token for the chart's operator ServiceAccount (TokenRequest, `kubectl create token`) and a
   kubeconfig with only that token: the operator runs with the chart's own arguments and nothing
   but the chart's permissions.
4. A 2-task TrainingJob of sample workers runs; one task is killed; the operator replaces it
   (incarnation 1) and the job succeeds.
5. The API server's audit log has no 403 for the operator's ServiceAccount (nor any other
   refusal of it), and the operator's log has no "forbidden".

Exit 0 pass, 1 fail, 77 skipped (no helm, no control-plane assets).
"""
import json
import os
import random
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import deploy_test as dt  # noqa: E402  (the chart helpers and the local cluster start-up)

NAMESPACE = dt.NAMESPACE
RELEASE = dt.RELEASE


wait_until = dt.wait_until


def main():
    if len(sys.argv) != 3:
        print(__doc__)
        return 2
    src, build = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    helm = dt.find_helm(src)
    if helm is None:
        return dt.SKIP
    kubectl = dt.find_kubectl(helm)
    try:
        with tempfile.TemporaryDirectory(prefix="phalanx-helm-install-") as tmp:
            return run_test(src, build, helm, kubectl, tmp)
    except dt.NoControlPlane as e:
        print(f"SKIP: needs a real control plane: {e}")
        return dt.SKIP
    except dt.Failure as e:
        print(f"FAIL (helm install): {e}")
        return 1


def run_test(src, build, helm, kubectl, tmp):
    # Pods run the sample worker and the coordinator by name, as from their images.
    path = os.pathsep.join([os.path.join(build, "examples", "sample_worker"),
                            os.path.join(build, "runtime", "coordination"), os.environ["PATH"]])
    cluster, log = dt.start_local_cluster(build, tmp, nodes=2, backend="real", env={"PATH": path})
    admin = os.path.join(tmp, "kubeconfig")
    operator = None
    try:
        def kc(*args, kubeconfig=admin, timeout=60, ok=True):
            r = dt.run([kubectl, "--kubeconfig", kubeconfig, *args], timeout=timeout)
            if ok:
                dt.check(r.returncode == 0, f"kubectl {' '.join(args)}:\n{r.stdout}{r.stderr}")
            return r

        r = dt.run([helm, "--kubeconfig", admin, "install", RELEASE, os.path.join(src, dt.CHART),
                    "--namespace", NAMESPACE, "--create-namespace",
                    "--set", "operator.replicas=0"], timeout=180)
        dt.check(r.returncode == 0, f"helm install:\n{r.stdout}{r.stderr}")
        status = dt.run([helm, "--kubeconfig", admin, "status", RELEASE, "-n", NAMESPACE, "-o", "json"])
        dt.check(status.returncode == 0 and json.loads(status.stdout)["info"]["status"] == "deployed",
                 f"helm status:\n{status.stdout}{status.stderr}")
        dt.wait_established(kubectl, admin, "trainingjobs.phalanx.dev")

        # The operator as the chart deploys it: its ServiceAccount, its arguments.
        deployment = json.loads(kc("get", "deployment", "-n", NAMESPACE, "-l",
                                   "app.kubernetes.io/component=operator", "-o", "json").stdout)
        dt.check(len(deployment["items"]) == 1, "one operator Deployment")
        pod_spec = deployment["items"][0]["spec"]["template"]["spec"]
        account = pod_spec["serviceAccountName"]
        token = kc("create", "token", account, "-n", NAMESPACE, "--duration", "1h").stdout.strip()
        config = json.loads(kc("config", "view", "--raw", "-o", "json").stdout)
        cluster_entry = config["clusters"][0]["cluster"]
        operator_kubeconfig = os.path.join(tmp, "operator.kubeconfig")
        with open(operator_kubeconfig, "w") as f:
            json.dump({"apiVersion": "v1", "kind": "Config",
                       "clusters": [{"name": "c", "cluster": cluster_entry}],
                       "users": [{"name": "operator", "user": {"token": token}}],
                       "contexts": [{"name": "c", "context": {"cluster": "c", "user": "operator"}}],
                       "current-context": "c"}, f)
        # Local-process substitutions only: where the metrics listen, who it is, and how a pod
        # here finds its coordinator (no cluster DNS: the pod IP and a port of its own).
        local = {"--metrics_listen": "127.0.0.1:0", "--identity": "helm-install-test",
                 "--coordinator_address": "pod-ip"}
        args = []
        for a in pod_spec["containers"][0]["args"]:
            flag = a.split("=", 1)[0]
            args.append(f"{flag}={local[flag]}" if flag in local else a)
        port_base = 20000 + random.randrange(4000) * 2
        operator_log = open(os.path.join(tmp, "operator.log"), "w")
        operator = subprocess.Popen(
            [os.path.join(build, "operator", "phalanx-operator"), "--kubeconfig",
             operator_kubeconfig, *args, f"--coordinator_port_base={port_base}"],
            stdout=subprocess.DEVNULL, stderr=operator_log, text=True)

        worker = os.path.join(build, "examples", "sample_worker", "phalanx-sample-worker")
        job = {"apiVersion": "phalanx.dev/v1alpha1", "kind": "TrainingJob",
               "metadata": {"name": "rbac", "namespace": "default"},
               "spec": {"replicas": 2,
                        "failurePolicy": {"maxRestarts": 3, "backoff": {"baseSeconds": 1, "maxSeconds": 2}},
                        "template": {"spec": {"terminationGracePeriodSeconds": 1, "containers": [{
                            "name": "worker", "image": "phalanx-sample-worker", "command": [worker],
                            "args": ["--steps=150", "--step_time=40ms", "--checkpoint_every=10",
                                     f"--checkpoint_dir={tmp}/ckpt"]}]}}}}
        job_file = os.path.join(tmp, "job.json")
        with open(job_file, "w") as f:
            json.dump(job, f)
        kc("apply", "-f", job_file)

        def phase():
            r = kc("get", "tj", "rbac", "-o", "jsonpath={.status.phase}", ok=False)
            return r.stdout if r.returncode == 0 else ""

        wait_until("the job to run", lambda: phase() == "Running", 120)
        kill = dt.run([os.path.join(build, "tests", "localcluster", "phalanx-localcluster"), "admin",
                       "--kubeconfig", admin, "kill-pod", "default/rbac-task-1-0"])
        dt.check(kill.returncode == 0, f"kill-pod:\n{kill.stderr}")
        wait_until("the replacement task rbac-task-1-1",
                   lambda: kc("get", "pod", "rbac-task-1-1", ok=False).returncode == 0, 90)
        wait_until("the job to succeed", lambda: phase() == "Succeeded", 180)
        got = json.loads(kc("get", "tj", "rbac", "-o", "json").stdout)
        dt.check(got["status"]["restarts"] == 1, f"restarts {got['status']['restarts']} != 1")
        dt.check(got["status"]["tasks"][1]["incarnation"] == 1, "task 1 is incarnation 1")

        # Nothing the operator asked for was refused.
        user = f"system:serviceaccount:{NAMESPACE}:{account}"
        audit = os.path.join(tmp, "work", "control-plane", "audit.log")
        requests, refused = 0, []
        with open(audit) as f:
            for line in f:
                event = json.loads(line)
                if event.get("user", {}).get("username") != user:
                    continue
                requests += 1
                code = event.get("responseStatus", {}).get("code", 0)
                if code in (401, 403):
                    refused.append(f"{code} {event['verb']} {event['requestURI']}: "
                                   f"{event['responseStatus'].get('message', '')}")
        dt.check(requests > 20, f"only {requests} requests from {user} in the audit log")
        dt.check(not refused, f"{len(refused)} refused requests from the operator:\n" +
                 "\n".join(refused[:20]))
        operator_log.flush()
        with open(os.path.join(tmp, "operator.log")) as f:
            text = f.read()
        dt.check("forbidden" not in text.lower(), "the operator logged 'forbidden':\n" + text[-3000:])
        # `helm uninstall` leaves nothing in the release namespace: what the operator created
        # for itself (its Lease, its key and CA Secrets) is owned by the chart's ServiceAccount, and the
        # garbage collector removes it with the account.
        operator.terminate()
        operator.wait(timeout=30)
        operator = None
        owned = {}
        for kind, name in (("lease", "phalanx-operator"), ("secret", "phalanx-operator-key"),
                           ("secret", "phalanx-operator-ca")):
            got = json.loads(kc("get", kind, name, "-n", NAMESPACE, "-o", "json").stdout)
            owned[name] = [o.get("kind") for o in got["metadata"].get("ownerReferences", [])]
        dt.check(owned == {"phalanx-operator": ["ServiceAccount"],
                           "phalanx-operator-key": ["ServiceAccount"],
                           "phalanx-operator-ca": ["ServiceAccount"]},
                 f"the operator's own objects are not owned by its ServiceAccount: {owned}")
        r = dt.run([helm, "--kubeconfig", admin, "uninstall", RELEASE, "-n", NAMESPACE,
                    "--wait", "--timeout", "120s"], timeout=180)
        dt.check(r.returncode == 0, f"helm uninstall:\n{r.stdout}{r.stderr}")

        def left_behind():
            out = kc("get", "leases,secrets,configmaps,serviceaccounts,roles,rolebindings,"
                     "services,deployments,daemonsets", "-n", NAMESPACE, "-o",
                     "jsonpath={range .items[*]}{.kind}/{.metadata.name} {end}").stdout.split()
            # What Kubernetes itself keeps in every namespace.
            return [o for o in out if o not in ("ConfigMap/kube-root-ca.crt",
                                                "ServiceAccount/default")]
        try:
            wait_until("helm uninstall to leave nothing behind", lambda: not left_behind(), 90)
        except dt.Failure:
            raise dt.Failure(f"left behind in {NAMESPACE} after helm uninstall: {left_behind()}")
        print(f"PASS (helm install): {requests} operator requests, none refused; "
              f"job restarted task 1 and succeeded; helm uninstall left nothing in {NAMESPACE}")
        return 0
    finally:
        if operator is not None:
            operator.terminate()
            try:
                operator.wait(timeout=30)
            except subprocess.TimeoutExpired:
                operator.kill()
        dt.stop_local_cluster(cluster, log)


if __name__ == "__main__":
    sys.exit(main())
