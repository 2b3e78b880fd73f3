#!/usr/bin/env python3
"""Checks of the deployment artefacts: the Helm chart, its copies of the CRDs, dashboard and
alert rules, the metrics those reference, and the image Containerfiles.

  deploy_test.py SOURCE_DIR BINARY_DIR CHECK

CHECK is one of:
  render       helm lint; helm template with default values and tests/deploy/values-custom.yaml;
               key fields of the rendered objects (security, leader election, RBAC, ...)
  apply        the default render applied with kubectl to a fresh phalanx-localcluster
  sync         chart crds/ == crds/; chart files/ == deploy/dashboards, deploy/alerts
  metrics      every metric the dashboard and the alert rules use is one Phalanx exports
  containerfiles  deploy/docker/Containerfile.* describe the images scripts/build-images.sh
               builds (FROM scratch, user 65532, entrypoint, OCI labels); the chart's image names,
               registry and tag (appVersion == CMake's project version) are those images';
               install-deps.sh installs buildah. tests/deploy/images_test.py builds and runs them.

Exit 0 pass, 1 fail, 77 skipped (helm could not be found or installed). Standard library plus
PyYAML (Debian's python3-yaml, installed by scripts/install-deps.sh).
"""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

try:
    import yaml
except ImportError:
    # A python3 without PyYAML (e.g. a pyenv one) may stand first on PATH: use Debian's.
    if sys.executable != "/usr/bin/python3" and os.access("/usr/bin/python3", os.X_OK):
        os.execv("/usr/bin/python3", ["/usr/bin/python3", *sys.argv])
    sys.exit("deploy_test.py needs PyYAML: apt-get install python3-yaml (scripts/install-deps.sh)")

SKIP = 77
RELEASE = "phalanx"
NAMESPACE = "phalanx-system"
CHART = "deploy/helm/phalanx"


class Failure(Exception):
    pass


def check(cond, message):
    if not cond:
        raise Failure(message)


def wait_until(what, predicate, timeout, interval=0.25):
    """Polls predicate (a bounded wait on a cluster's state) until it returns a truthy value,
    which it returns; Failure after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(interval)
    raise Failure(f"{what}: not within {timeout}s")


def run(cmd, timeout=60, **kwargs):
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kwargs)


# ---------------------------------------------------------------------------------------------
# helm and kubectl

def find_helm(src):
    """The helm v3 binary: $PHALANX_HELM, helm on PATH, or install-helm.sh's (installing it)."""
    candidates = [os.environ.get("PHALANX_HELM"), shutil.which("helm")]
    installer = os.path.join(src, "scripts", "install-helm.sh")
    printed = run([installer, "--print"])
    if printed.returncode == 0:
        candidates.append(printed.stdout.strip())
    for c in candidates:
        if c and os.access(c, os.X_OK):
            v = run([c, "version", "--short"])
            if v.returncode == 0 and v.stdout.startswith("v3."):
                return c
    installed = run([installer], timeout=300)
    if installed.returncode == 0:
        return installed.stdout.strip().splitlines()[-1]
    print("SKIP: helm is not installed and scripts/install-helm.sh failed:\n" + installed.stderr)
    return None


def find_kubectl(helm):
    beside = os.path.join(os.path.dirname(helm), "kubectl")
    for c in [os.environ.get("PHALANX_KUBECTL"), shutil.which("kubectl"), beside]:
        if c and os.access(c, os.X_OK):
            return c
    return None


def helm_template(helm, src, values=None, extra=()):
    cmd = [helm, "template", RELEASE, os.path.join(src, CHART), "--namespace", NAMESPACE,
           "--include-crds", *extra]
    if values:
        cmd += ["-f", values]
    r = run(cmd)
    check(r.returncode == 0, f"{' '.join(cmd)} failed:\n{r.stderr}")
    return r.stdout


def objects(rendered):
    return [d for d in yaml.safe_load_all(rendered) if d]


def one(objs, kind, name_suffix=""):
    found = [o for o in objs if o["kind"] == kind and o["metadata"]["name"].endswith(name_suffix)]
    check(len(found) == 1, f"expected one {kind} *{name_suffix}, found {len(found)}")
    return found[0]


def of_kind(objs, kind):
    return [o for o in objs if o["kind"] == kind]


# ---------------------------------------------------------------------------------------------
# render

def check_pod_security(workload):
    name = workload["metadata"]["name"]
    spec = workload["spec"]["template"]["spec"]
    psc = spec.get("securityContext", {})
    check(psc.get("runAsNonRoot") is True, f"{name}: pod securityContext.runAsNonRoot")
    check(psc.get("runAsUser") == 65532, f"{name}: pod runs as uid 65532")
    check(psc.get("seccompProfile", {}).get("type") == "RuntimeDefault", f"{name}: seccomp")
    for c in spec["containers"]:
        sc = c.get("securityContext", {})
        check(sc.get("readOnlyRootFilesystem") is True, f"{name}/{c['name']}: readOnlyRootFilesystem")
        check(sc.get("allowPrivilegeEscalation") is False, f"{name}/{c['name']}: no privilege escalation")
        check(sc.get("capabilities", {}).get("drop") == ["ALL"], f"{name}/{c['name']}: drop ALL")
        check("add" not in sc.get("capabilities", {}), f"{name}/{c['name']}: adds no capability")
        check(c.get("livenessProbe", {}).get("httpGet", {}).get("path") == "/healthz",
              f"{name}/{c['name']}: livenessProbe on /healthz")
        ready = "/readyz" if workload["kind"] == "Deployment" else "/healthz"
        check(c.get("readinessProbe", {}).get("httpGet", {}).get("path") == ready,
              f"{name}/{c['name']}: readinessProbe on {ready}")
        check("limits" in c.get("resources", {}), f"{name}/{c['name']}: resource limits")


def rules_of(objs, subject_suffix):
    """Every RBAC rule bound (through any binding) to the ServiceAccount named *subject_suffix."""
    roles = {(o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]): o
             for o in objs if o["kind"] in ("Role", "ClusterRole")}
    rules = []
    for b in objs:
        if b["kind"] not in ("RoleBinding", "ClusterRoleBinding"):
            continue
        if not any(s["name"].endswith(subject_suffix) for s in b["subjects"]):
            continue
        ns = b["metadata"].get("namespace") if b["roleRef"]["kind"] == "Role" else None
        role = roles.get((b["roleRef"]["kind"], ns, b["roleRef"]["name"]))
        check(role is not None, f"{b['metadata']['name']} binds a missing {b['roleRef']}")
        for r in role["rules"]:
            rules.append((b["kind"], ns, r))
    return rules


def verbs_for(rules, group, resource):
    out = set()
    for _, _, r in rules:
        if group in r.get("apiGroups", []) and resource in r.get("resources", []):
            out |= set(r["verbs"])
    return out


def check_rbac(objs, operator_ns_scoped):
    for o in of_kind(objs, "Role") + of_kind(objs, "ClusterRole"):
        for r in o["rules"]:
            for field in ("apiGroups", "resources", "verbs"):
                check("*" not in r.get(field, []), f"{o['metadata']['name']}: wildcard {field}")
    op = rules_of(objs, "-operator")
    check(verbs_for(op, "phalanx.dev", "trainingjobs") ==
          {"get", "list", "watch", "update", "patch", "delete"},
          "operator: trainingjobs get/list/watch/update/patch/delete")
    check({"update", "patch"} <= verbs_for(op, "phalanx.dev", "trainingjobs/status"),
          "operator: trainingjobs/status update/patch")
    # blockOwnerDeletion on the children's ownerReferences needs it under the
    # OwnerReferencesPermissionEnforcement admission plugin (issue 11).
    check(verbs_for(op, "phalanx.dev", "trainingjobs/finalizers") == {"update"},
          "operator: trainingjobs/finalizers update")
    # patch on pods: a spare pod that took a task over is relabelled as the task's (ADR 0007).
    for res, extra in (("pods", {"patch"}), ("services", set())):
        check(verbs_for(op, "", res) == {"get", "list", "watch", "create", "delete"} | extra,
              f"operator: {res} get/list/watch/create/delete{'/patch' if extra else ''}, "
              f"got {verbs_for(op, '', res)}")
    # Secrets (issue 16 item 7, ADR 0003): create anywhere, read nothing but the operator key
    # and the agents' clique-ticket key (which it may also correct), by name, in the release
    # namespace (issue 30 item 6).
    check(verbs_for(op, "", "secrets") == {"get", "create", "update"},
          f"operator: secrets {verbs_for(op, '', 'secrets')}")
    for kind, ns, r in op:
        if "secrets" in r.get("resources", []) and set(r["verbs"]) - {"create"}:
            check(kind == "RoleBinding" and ns == NAMESPACE and r.get("resourceNames"),
                  f"operator: reads Secrets beyond its keys: {kind} {ns} {r}")
            if "update" in r["verbs"]:
                check(r.get("resourceNames") == ["phalanx-agent-clique-key"],
                      f"operator: updates a Secret other than the agents' key: {r}")
            elif "get" in r["verbs"]:
                # The operator key and the operator's CA (docs/security.md, TLS by default).
                check(r.get("resourceNames") == ["phalanx-operator-key", "phalanx-operator-ca"],
                      f"operator: reads Secrets other than its key and CA: {r}")
    daemonset = [o for o in objs if o.get("kind") == "DaemonSet"]
    check(len(daemonset) == 1, "one agent DaemonSet")
    if daemonset:
        pod = daemonset[0]["spec"]["template"]["spec"]
        agent_args = pod["containers"][0]["args"]
        check("--clique_ticket_key_file=/etc/phalanx/agent-clique/key" in agent_args,
              f"agent: verifies clique tickets: {agent_args}")
        secrets = [v["secret"] for v in pod["volumes"] if "secret" in v]
        check(secrets == [{"secretName": "phalanx-agent-clique-key", "optional": True,
                           "defaultMode": 0o444}],
              f"agent: mounts the agents' key Secret only (optional): {secrets}")
    check(verbs_for(op, "networking.k8s.io", "networkpolicies") == {"get", "create"},
          "operator: networkpolicies get/create")
    check(verbs_for(op, "", "events") == {"create", "patch", "update"}, "operator: events")
    check(verbs_for(op, "", "nodes") == {"get", "list", "watch"}, "operator: nodes read-only")
    leases = [(kind, ns) for kind, ns, r in op if "leases" in r.get("resources", [])]
    check(leases == [("RoleBinding", NAMESPACE)], f"operator: leases only in {NAMESPACE}: {leases}")
    check(verbs_for(op, "coordination.k8s.io", "leases") == {"get", "create", "update"}, "leases")
    job_scope = {kind for kind, _, r in op if "trainingjobs" in r.get("resources", [])}
    check(job_scope == ({"RoleBinding"} if operator_ns_scoped else {"ClusterRoleBinding"}),
          f"operator: trainingjobs bound by {job_scope}")

    agent = rules_of(objs, "-agent")
    check(agent, "agent: no RBAC rules")
    for _, _, r in agent:
        check(not {"secrets", "trainingjobs", "configmaps"} & set(r.get("resources", [])),
              f"agent must not touch secrets, trainingjobs or configmaps: {r}")
    check(verbs_for(agent, "", "nodes") == {"get", "update", "patch"}, "agent: nodes get/update/patch")
    check(verbs_for(agent, "", "nodes/status") == {"update", "patch"}, "agent: nodes/status")
    check(verbs_for(agent, "", "events") == {"create", "patch", "update"}, "agent: events")
    check(verbs_for(agent, "", "pods") == {"get"}, "agent: pods get only")
    pods_scope = [(k, ns) for k, ns, r in agent if "pods" in r.get("resources", [])]
    check(pods_scope == [("RoleBinding", NAMESPACE)], f"agent: pods only in its namespace: {pods_scope}")


def args_of(container):
    return dict(a.split("=", 1) if "=" in a else (a, "") for a in container.get("args", []))


def check_agent_node_binding(src, helm):
    """ADR 0003: agent.nodeBinding=auto installs the ValidatingAdmissionPolicy that binds each
    agent to its own Node only where the API is served (Kubernetes >= 1.30); true forces it,
    false never. (The envtest control plane is 1.26, so the policy itself cannot run here.)"""
    vap = ("--api-versions", "admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy")
    kinds = ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")

    def policy_objects(extra):
        objs = objects(helm_template(helm, src, extra=extra))
        return [o for o in objs if o["kind"] in kinds]

    check(not policy_objects(("--kube-version", "1.26.0")), "nodeBinding auto: no policy on 1.26")
    found = policy_objects(("--kube-version", "1.30.0", *vap))
    check(sorted(o["kind"] for o in found) == sorted(kinds), f"nodeBinding auto on 1.30: {found}")
    policy = next(o for o in found if o["kind"] == "ValidatingAdmissionPolicy")
    binding = next(o for o in found if o["kind"] == "ValidatingAdmissionPolicyBinding")
    check(binding["spec"]["policyName"] == policy["metadata"]["name"], "binding names the policy")
    check(binding["spec"]["validationActions"] == ["Deny"], "binding denies")
    check(policy["spec"]["failurePolicy"] == "Fail", "policy fails closed")
    match = policy["spec"]["matchConditions"][0]["expression"]
    check(f"system:serviceaccount:{NAMESPACE}:" in match and "-agent" in match,
          f"policy matches the agent's ServiceAccount only: {match}")
    rules = policy["spec"]["matchConstraints"]["resourceRules"][0]
    check(set(rules["resources"]) == {"nodes", "nodes/status"} and rules["operations"] == ["UPDATE"],
          f"policy covers Node updates: {rules}")
    exprs = " ".join(v["expression"] for v in policy["spec"]["validations"])
    check("authentication.kubernetes.io/node-name" in exprs, "policy checks the token's node")
    check("phalanx.dev/" in exprs, "policy limits taint changes to phalanx.dev/")
    check(not policy_objects(("--kube-version", "1.30.0", *vap, "--set", "agent.nodeBinding=false")),
          "nodeBinding false: no policy")
    check(len(policy_objects(("--kube-version", "1.26.0", "--set", "agent.nodeBinding=true"))) == 2,
          "nodeBinding true: the policy whatever the server says")


def check_render(src, binary_dir, helm):
    chart = os.path.join(src, CHART)
    custom = os.path.join(src, "tests", "deploy", "values-custom.yaml")
    for values in (None, custom):
        cmd = [helm, "lint", "--strict", chart] + (["-f", values] if values else [])
        r = run(cmd)
        check(r.returncode == 0, f"{' '.join(cmd)}:\n{r.stdout}{r.stderr}")

    # The oldest Kubernetes the chart supports (Chart.yaml kubeVersion; docs/deploy.md): 1.26, where
    # CRD validation rules (CEL) are beta and on by default. Older ones are refused by helm.
    helm_template(helm, src, extra=("--kube-version", "1.26.0"))
    cmd = [helm, "template", RELEASE, chart, "--kube-version", "1.25.16"]
    check(run(cmd).returncode != 0, "chart installs on Kubernetes 1.25 (CEL rules are alpha there)")
    check_agent_node_binding(src, helm)

    # Default values.
    objs = objects(helm_template(helm, src))
    crd = one(objs, "CustomResourceDefinition")
    with open(os.path.join(src, "crds", "trainingjobs.phalanx.dev.yaml")) as f:
        check(crd == yaml.safe_load(f), "rendered CRD differs from crds/")
    for kind in ("ServiceMonitor", "PodMonitor", "PrometheusRule"):
        check(not of_kind(objs, kind), f"{kind} rendered with default values")
    dep = one(objs, "Deployment", "-operator")
    ds = one(objs, "DaemonSet", "-agent")
    for w in (dep, ds):
        check_pod_security(w)
    check(dep["spec"]["replicas"] == 1, "operator: one replica by default")
    op = dep["spec"]["template"]["spec"]["containers"][0]
    a = args_of(op)
    check(a.get("--leader_elect") == "true", "operator: --leader_elect=true")
    check(a.get("--metrics_listen") == "0.0.0.0:8080", "operator: --metrics_listen 0.0.0.0:8080")
    check(a.get("--lease_namespace") == NAMESPACE, "operator: lease in the release namespace")
    version = project_version(src)
    check(a.get("--coordinator_image") == f"ghcr.io/phalanx-dev/phalanx-coordinator:{version}",
          f"operator: coordinator image {a.get('--coordinator_image')}")
    check(a.get("--coordinator_command") == "phalanx-coordinator", "operator: coordinator command")
    check(a.get("--namespace") == "", "operator: watches every namespace by default")
    # TLS between tasks and coordinators by default (issue 30 item 7), with the operator's CA.
    check(a.get("--coordinator_tls") == "true", f"operator: --coordinator_tls {a.get('--coordinator_tls')}")
    check(a.get("--ca_secret") == "phalanx-operator-ca", f"operator: --ca_secret {a.get('--ca_secret')}")
    check(dep["spec"]["template"]["spec"]["serviceAccountName"].endswith("-operator"), "operator SA")

    ag = ds["spec"]["template"]["spec"]["containers"][0]
    a = args_of(ag)
    check(a.get("--clique_socket") == "/var/run/phalanx/cliques.sock", "agent: --clique_socket")
    check(a.get("--notice_sources") == "node-taint,sigterm", "agent: default notice sources")
    check(a.get("--gpu_failure_policy") == "node", "agent: a failed GPU moves the node's tasks")
    check(a.get("--metrics_listen") == "0.0.0.0:9400", "agent: metrics on 9400")
    env = {e["name"]: e.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") for e in ag["env"]}
    check(env.get("NODE_NAME") == "spec.nodeName", "agent: NODE_NAME from spec.nodeName")
    check(env.get("POD_NAME") == "metadata.name", "agent: POD_NAME")
    check(env.get("POD_NAMESPACE") == "metadata.namespace", "agent: POD_NAMESPACE")
    check(ag["livenessProbe"]["httpGet"]["port"] in (9400, "metrics"), "agent: probe port")
    vols = {v["name"]: v for v in ds["spec"]["template"]["spec"]["volumes"]}
    check(vols["socket-dir"]["hostPath"]["path"] == "/var/run/phalanx", "agent: hostPath socket dir")
    check(any(m["mountPath"] == "/var/run/phalanx" for m in ag["volumeMounts"]), "agent: socket mount")
    # The agent's image is FROM scratch: its init container can run only the agent itself
    # (once a /bin/sh -c chown here left every default install in Init:CrashLoopBackOff).
    init = ds["spec"]["template"]["spec"]["initContainers"][0]
    check("command" not in init, "agent init container: the image's entrypoint, no command")
    check(init.get("args") == ["prepare-socket-dir", "/var/run/phalanx", "65532:65532"],
          f"agent init container: args {init.get('args')}")
    spec = ds["spec"]["template"]["spec"]
    check(spec.get("nodeSelector") == {"nvidia.com/gpu.present": "true"}, "agent: GPU nodeSelector")
    check(any(t.get("key") == "nvidia.com/gpu" for t in spec.get("tolerations", [])), "agent: GPU toleration")
    check_rbac(objs, operator_ns_scoped=False)
    cm = one(objs, "ConfigMap", "-dashboard")
    check(cm["metadata"]["labels"].get("grafana_dashboard") == "1", "dashboard label")
    with open(os.path.join(src, "deploy", "dashboards", "phalanx.json")) as f:
        check(json.loads(cm["data"]["phalanx.json"]) == json.load(f), "dashboard ConfigMap content")

    # Non-default values.
    objs = objects(helm_template(helm, src, custom))
    dep = one(objs, "Deployment", "-operator")
    ds = one(objs, "DaemonSet", "-agent")
    for w in (dep, ds):
        check_pod_security(w)
    check(dep["spec"]["replicas"] == 2, "custom: two operator replicas")
    op = dep["spec"]["template"]["spec"]["containers"][0]
    a = args_of(op)
    check(a.get("--leader_elect") == "true", "custom: leader election on")
    check(a.get("--namespace") == "ml-jobs", "custom: watchNamespace")
    check(op["image"] == f"registry.example.com/ml/phalanx-operator:{version}",
          f"custom image {op['image']}")
    check(a.get("--coordinator_image") == "registry.example.com/ml/phalanx-coordinator:0.1-test",
          "custom: coordinator image")
    check(a.get("--coordinator_command") == "/usr/local/bin/phalanx-coordinator", "custom: command")
    check("--coordinator_port_base" in a, "custom: extraArgs")
    spec = ds["spec"]["template"]["spec"]
    with open(custom) as f:
        cv = yaml.safe_load(f)
    check(spec["tolerations"] == cv["agent"]["tolerations"], "custom: agent tolerations")
    selector = {k: v for k, v in cv["agent"]["nodeSelector"].items() if v is not None}
    check(spec["nodeSelector"] == selector, f"custom: agent nodeSelector {spec['nodeSelector']}")
    check(spec.get("runtimeClassName") == "nvidia", "custom: runtimeClassName")
    check(any(v["name"] == "driver-libs" for v in spec["volumes"]), "custom: driver libraries")
    a = args_of(spec["containers"][0])
    check(a.get("--notice_sources") == "node-taint,sigterm,gce", "custom: gce notice source")
    check(a.get("--required_cuda") == "12.4", "custom: --required_cuda")
    check(a.get("--gpu_failure_policy") == "task", "custom: --gpu_failure_policy=task")
    check_rbac(objs, operator_ns_scoped=True)
    sms = of_kind(objs, "ServiceMonitor")
    check(len(sms) == 2, f"custom: two ServiceMonitors, got {len(sms)}")
    for sm in sms:
        check(sm["metadata"]["labels"].get("release") == "kube-prometheus-stack", "ServiceMonitor labels")
    # The operator's per-job series keep their job's `namespace` label (the alerts group by it).
    op_sm = [sm for sm in sms if sm["metadata"]["labels"].get("app.kubernetes.io/component") == "operator"]
    check(len(op_sm) == 1 and op_sm[0]["spec"]["endpoints"][0].get("honorLabels") is True,
          "the operator's ServiceMonitor must set honorLabels: true")
    pm = one(objs, "PodMonitor")
    check(pm["spec"]["selector"]["matchLabels"] == {"phalanx.dev/role": "coordinator"}, "PodMonitor selector")
    pr = one(objs, "PrometheusRule")
    with open(os.path.join(src, "deploy", "alerts", "phalanx-rules.yaml")) as f:
        check(pr["spec"] == yaml.safe_load(f), "PrometheusRule spec differs from deploy/alerts")

    # Cleartext only when asked for.
    objs = objects(helm_template(helm, src, extra=("--set", "coordinator.tls=false")))
    a = args_of(one(objs, "Deployment", "-operator")["spec"]["template"]["spec"]["containers"][0])
    check(a.get("--coordinator_tls") == "false", "coordinator.tls=false: --coordinator_tls=false")

    # A standby replica without leader election would act twice: the chart refuses.
    r = run([helm, "template", RELEASE, chart, "--set", "operator.replicas=2",
             "--set", "operator.leaderElection.enabled=false"])
    check(r.returncode != 0 and "leaderElection" in r.stderr,
          "replicas=2 without leader election must fail to render")



# ---------------------------------------------------------------------------------------------
# the local cluster

class NoControlPlane(Exception):
    """--backend real was asked for and no control-plane assets exist here."""


def start_local_cluster(binary_dir, tmp, nodes, backend="auto", env=None, timeout=120):
    """Starts phalanx-localcluster with its kubeconfig at TMP/kubeconfig; returns (process, log).
    The ready line's backend is printed, so the test log says which control plane ran."""
    cluster_bin = os.path.join(binary_dir, "tests", "localcluster", "phalanx-localcluster")
    check(os.access(cluster_bin, os.X_OK), f"{cluster_bin} is not built")
    log_path = os.path.join(tmp, "cluster.log")
    log = open(log_path, "w")
    cluster = subprocess.Popen([cluster_bin, "--kubeconfig-out", os.path.join(tmp, "kubeconfig"),
                                "--work-dir", os.path.join(tmp, "work"), "--nodes", str(nodes),
                                "--backend", backend],
                               stdout=subprocess.PIPE, stderr=log, text=True,
                               env={**os.environ, **(env or {})})
    deadline = time.monotonic() + timeout
    line = ""
    while time.monotonic() < deadline:
        line = cluster.stdout.readline()
        if not line or line.startswith("ready "):
            break
    if not line.startswith("ready "):
        stop_local_cluster(cluster, log)
        with open(log_path) as f:
            tail = f.read()[-3000:]
        if "no control-plane assets" in tail:
            raise NoControlPlane(tail.strip().splitlines()[-1])
        raise Failure(f"local cluster did not start: {line!r}\n{tail}")
    print(f"local cluster: {line.strip()}")
    return cluster, log


def wait_established(kubectl, kubeconfig, crd, timeout=60):
    """Until the CRD is Established (a real API server serves its resource only then). Polled:
    `kubectl wait --for condition=...` fails outright while status.conditions is still empty."""
    deadline = time.monotonic() + timeout
    jsonpath = 'jsonpath={.status.conditions[?(@.type=="Established")].status}'
    while time.monotonic() < deadline:
        r = run([kubectl, "--kubeconfig", kubeconfig, "get", "crd", crd, "-o", jsonpath])
        if r.returncode == 0 and r.stdout.strip() == "True":
            return
        time.sleep(0.2)
    raise Failure(f"CRD {crd} not Established within {timeout}s")


def stop_local_cluster(cluster, log):
    cluster.send_signal(signal.SIGTERM)
    try:
        cluster.wait(timeout=30)
    except subprocess.TimeoutExpired:
        cluster.kill()
        cluster.wait()
    log.close()

# ---------------------------------------------------------------------------------------------
# apply

def check_apply(src, binary_dir, helm):
    kubectl = find_kubectl(helm)
    check(kubectl is not None, "no kubectl (PATH, $PHALANX_KUBECTL or beside helm)")
    rendered = helm_template(helm, src)
    with tempfile.TemporaryDirectory(prefix="phalanx-deploy-test-") as tmp:
        kubeconfig = os.path.join(tmp, "kubeconfig")
        manifest = os.path.join(tmp, "rendered.yaml")
        with open(manifest, "w") as f:
            f.write(rendered)
        cluster, log = start_local_cluster(binary_dir, tmp, nodes=1)
        try:
            def kc(*args, timeout=40):
                r = run([kubectl, "--kubeconfig", kubeconfig, *args], timeout=timeout)
                check(r.returncode == 0, f"kubectl {' '.join(args)}:\n{r.stdout}{r.stderr}")
                return r.stdout

            # (kubectl create sends protobuf, which the local cluster does not speak; apply is JSON.)
            ns_manifest = os.path.join(tmp, "namespace.yaml")
            with open(ns_manifest, "w") as f:
                f.write(f"apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {NAMESPACE}\n")
            kc("apply", "-f", ns_manifest)
            out = kc("apply", "-f", manifest)
            print(out, end="")
            for o in objects(rendered):
                kind, name = o["kind"].lower(), o["metadata"]["name"]
                ns = ["-n", o["metadata"]["namespace"]] if "namespace" in o["metadata"] else []
                got = json.loads(kc("get", kind, name, *ns, "-o", "json"))
                check(got["metadata"]["name"] == name, f"{kind}/{name} not stored")
            # The CRD from the chart serves TrainingJobs (a real API server once it is Established).
            wait_established(kubectl, kubeconfig, "trainingjobs.phalanx.dev")
            kc("get", "trainingjobs", "-A")
            # Applying again changes nothing and still succeeds.
            out = kc("apply", "-f", manifest)
            check("created" not in out, f"second apply created objects:\n{out}")

            # The non-default render too (its operator watches ml-jobs), less the Prometheus
            # Operator kinds whose CRDs only a cluster with the Prometheus Operator has.
            custom = os.path.join(src, "tests", "deploy", "values-custom.yaml")
            kept = [o for o in objects(helm_template(helm, src, custom))
                    if o["apiVersion"] != "monitoring.coreos.com/v1"]
            custom_manifest = os.path.join(tmp, "rendered-custom.yaml")
            with open(custom_manifest, "w") as f:
                f.write("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: ml-jobs\n---\n")
                yaml.safe_dump_all(kept, f)
            kc("apply", "-f", custom_manifest)
            role = json.loads(kc("get", "role", f"{RELEASE}-operator", "-n", "ml-jobs", "-o", "json"))
            check(role["rules"], "custom: operator Role in ml-jobs")

            # helm itself against the cluster: version constraint, CRD and NOTES rendering.
            # (A real `helm install` stores the release as a protobuf Secret, which the local
            # cluster does not speak; --dry-run=client reads /version and discovery only.)
            r = run([helm, "--kubeconfig", kubeconfig, "install", "dry", os.path.join(src, CHART),
                     "--namespace", NAMESPACE, "--dry-run=client"])
            check(r.returncode == 0 and "NOTES:" in r.stdout, f"helm install --dry-run:\n{r.stderr}")
        finally:
            stop_local_cluster(cluster, log)


# ---------------------------------------------------------------------------------------------
# sync

def same_bytes(a, b):
    with open(a, "rb") as fa, open(b, "rb") as fb:
        return fa.read() == fb.read()


def check_sync(src, binary_dir):
    chart = os.path.join(src, CHART)
    crds = sorted(f for f in os.listdir(os.path.join(src, "crds")) if f.endswith(".yaml"))
    chart_crds = sorted(os.listdir(os.path.join(chart, "crds")))
    check(crds == chart_crds, f"chart crds/ {chart_crds} != crds/ {crds}: cp crds/*.yaml {CHART}/crds/")
    for f in crds:
        check(same_bytes(os.path.join(src, "crds", f), os.path.join(chart, "crds", f)),
              f"{CHART}/crds/{f} differs from crds/{f}: cp crds/{f} {CHART}/crds/")
    for original, copy in (("deploy/dashboards/phalanx.json", "files/phalanx.json"),
                           ("deploy/alerts/phalanx-rules.yaml", "files/phalanx-rules.yaml")):
        check(not os.path.islink(os.path.join(chart, copy)), f"{copy} must be a copy, not a link")
        check(same_bytes(os.path.join(src, original), os.path.join(chart, copy)),
              f"{CHART}/{copy} differs from {original}: cp {original} {CHART}/{copy}")
    with open(os.path.join(src, "deploy", "dashboards", "phalanx.json")) as f:
        dash = json.load(f)
    check(dash.get("uid") and dash.get("title") and dash.get("panels"), "dashboard: uid, title, panels")
    ids = [p["id"] for p in all_panels(dash)]
    check(len(ids) == len(set(ids)), "dashboard: panel ids are unique")
    with open(os.path.join(src, "deploy", "alerts", "phalanx-rules.yaml")) as f:
        rules = yaml.safe_load(f)
    names = []
    for g in rules["groups"]:
        for r in g["rules"]:
            check("alert" in r and "expr" in r and "severity" in r.get("labels", {}),
                  f"rule {r.get('alert')}: alert, expr and a severity label")
            check("summary" in r.get("annotations", {}), f"rule {r['alert']}: a summary")
            names.append(r["alert"])
    check(len(names) == len(set(names)), "alert names are unique")


# ---------------------------------------------------------------------------------------------
# metrics

SOURCE_DIRS = ("common", "operator", "node_agent", "runtime")
PROMQL_WORDS = {
    "by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or", "unless",
    "offset", "inf", "nan", "le",
}
# Series Prometheus itself writes for every scrape target.
PROMETHEUS_SERIES = {"up", "scrape_duration_seconds", "scrape_samples_scraped"}


def exported_metrics(src):
    """{name: type} of every metric family the sources register (non-test C++ files)."""
    found = {}
    pattern = re.compile(r'"(phalanx_[a-z0-9_]+)"')
    builder = re.compile(r"Build(Counter|Gauge|Histogram|Summary)\s*\(")
    for top in SOURCE_DIRS:
        for root, _, files in os.walk(os.path.join(src, top)):
            for name in files:
                if not name.endswith((".cc", ".h")) or name.endswith("_test.cc"):
                    continue
                text = open(os.path.join(root, name), encoding="utf-8").read()
                for m in pattern.finditer(text):
                    before = text[max(0, m.start() - 300):m.start()]
                    kinds = builder.findall(before)
                    if kinds and ("Name(" in before[-40:] or re.search(r"Build\w*\(\),\s*$", before)):
                        found[m.group(1)] = kinds[-1].lower()
    return found


def promql_metrics(expr):
    """Metric names in a PromQL expression (identifiers that are not functions, keywords,
    labels, strings, durations or grouping lists)."""
    e = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)            # strings
    e = re.sub(r"\{[^}]*\}", "", e)                          # label matchers
    e = re.sub(r"\[[^\]]*\]", "", e)                         # ranges, subqueries
    e = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", e)
    e = re.sub(r"\$\{?\w+\}?", "", e)                        # Grafana variables
    names = set()
    for m in re.finditer(r"(?<![\w.])([a-zA-Z_:][a-zA-Z0-9_:]*)\b(\s*\()?", e):
        word, call = m.group(1), m.group(2)
        if call or word.lower() in PROMQL_WORDS or re.fullmatch(r"\d+[smhdwy]", word):
            continue
        names.add(word)
    return names


def all_panels(dash):
    for p in dash.get("panels", []):
        yield p
        yield from p.get("panels", [])


def dashboard_exprs(dash):
    for p in all_panels(dash):
        for t in p.get("targets", []):
            if t.get("expr"):
                yield f"panel '{p.get('title')}'", t["expr"]
    for v in dash.get("templating", {}).get("list", []):
        q = v.get("query")
        q = q.get("query") if isinstance(q, dict) else q
        if v.get("type") == "query" and q:
            m = re.fullmatch(r"\s*label_values\((.*),\s*\w+\s*\)\s*", q)
            yield f"variable '{v['name']}'", m.group(1) if m else q


def check_metrics(src, binary_dir):
    exported = exported_metrics(src)
    check(len(exported) >= 20, f"found only {len(exported)} exported metrics: is the grep broken?")
    for must in ("phalanx_operator_jobs", "phalanx_agent_xid_errors_total",
                 "phalanx_coordinator_barrier_wait_seconds"):
        check(must in exported, f"{must} not found among exported metrics")
    allowed = set(PROMETHEUS_SERIES)
    for name, kind in exported.items():
        allowed.add(name)
        if kind in ("histogram", "summary"):
            allowed |= {name + "_sum", name + "_count"}
        if kind == "histogram":
            allowed.add(name + "_bucket")

    with open(os.path.join(src, "deploy", "dashboards", "phalanx.json")) as f:
        dash = json.load(f)
    with open(os.path.join(src, "deploy", "alerts", "phalanx-rules.yaml")) as f:
        rules = yaml.safe_load(f)
    exprs = list(dashboard_exprs(dash))
    exprs += [(f"alert {r['alert']}", r["expr"]) for g in rules["groups"] for r in g["rules"]]
    check(len(exprs) > 20, "too few expressions found")
    used, bad = set(), []
    for where, expr in exprs:
        names = promql_metrics(expr)
        check(names, f"{where}: no metric in {expr!r}")
        used |= names
        bad += [f"{where}: {n}" for n in sorted(names - allowed)]
    check(not bad, "metrics Phalanx does not export:\n  " + "\n  ".join(bad))
    # A replacement no node can take leaves its job in Starting, not Restarting (issue 13): the
    # stuck-job alert must count the job's Unschedulable series too (its unit tests,
    # tests/prometheus/phalanx-rules_test.yaml, check that it fires on one).
    stuck = [r["expr"] for g in rules["groups"] for r in g["rules"]
             if r["alert"] == "PhalanxJobStuckRestarting"]
    check(stuck and {"phalanx_operator_job_phase", "phalanx_operator_job_unschedulable"}
          <= promql_metrics(stuck[0]),
          "alert PhalanxJobStuckRestarting must use phalanx_operator_job_phase (Restarting) and "
          "phalanx_operator_job_unschedulable (a job stuck in Starting on an unschedulable pod)")
    print(f"{len(exprs)} expressions use {len(used)} metrics, all exported "
          f"({len(exported)} families found in the sources)")


# ---------------------------------------------------------------------------------------------
# containerfiles

def install_deps_packages(src):
    text = open(os.path.join(src, "scripts", "install-deps.sh")).read()
    m = re.search(r"^PACKAGES=\((.*?)\)", text, re.S | re.M)
    check(m, "no PACKAGES=( ... ) in scripts/install-deps.sh")
    body = re.sub(r"#.*", "", m.group(1))
    return set(body.split())


def project_version(src):
    """CMake's project(phalanx VERSION x.y.z): what --version prints and the images' tag."""
    text = open(os.path.join(src, "CMakeLists.txt")).read()
    m = re.search(r"^project\(phalanx\s+VERSION\s+(\S+)", text, re.M)
    check(m, "no project(phalanx VERSION ...) in CMakeLists.txt")
    return m.group(1)


def chart_files(src):
    with open(os.path.join(src, CHART, "Chart.yaml")) as f:
        chart = yaml.safe_load(f)
    with open(os.path.join(src, CHART, "values.yaml")) as f:
        values = yaml.safe_load(f)
    return chart, values


def image_binaries(src):
    """{image: binary path in the build tree} from scripts/build-images.sh's BINARY table, and
    its default registry."""
    text = open(os.path.join(src, "scripts", "build-images.sh")).read()
    m = re.search(r"^declare -A BINARY=\((.*?)^\)", text, re.S | re.M)
    check(m, "no declare -A BINARY=( ... ) in scripts/build-images.sh")
    images = dict(re.findall(r"\[([\w-]+)\]=(\S+)", m.group(1)))
    reg = re.search(r'REGISTRY="\$\{PHALANX_IMAGE_REGISTRY:-([^}]+)\}"', text)
    check(reg, "no default PHALANX_IMAGE_REGISTRY in scripts/build-images.sh")
    return images, reg.group(1)


def containerfile_instructions(path):
    """Instruction lines with continuations joined, comments and blank lines dropped."""
    joined, buf = [], ""
    for raw in open(path):
        line = raw.rstrip("\n")
        if not buf and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if line.endswith("\\"):
            buf += line[:-1] + " "
            continue
        joined.append(buf + line)
        buf = ""
    return joined


OCI_LABELS = ("title", "version", "revision", "source")


def check_containerfiles(src, binary_dir):
    wanted = install_deps_packages(src)
    for p in ("python3-yaml", "unzip", "buildah", "ca-certificates", "etcd-server"):
        check(p in wanted, f"install-deps.sh does not install {p}")
    images, registry = image_binaries(src)
    check(set(images) == {"phalanx-operator", "phalanx-agent", "phalanx-coordinator",
                          "phalanx-sample-worker"}, f"build-images.sh builds {sorted(images)}")
    docker_dir = os.path.join(src, "deploy", "docker")
    present = sorted(os.listdir(docker_dir))
    # torch-worker/: the PyTorch worker (scripts/build-torch-worker-image.sh), on a PyTorch base.
    expected = sorted([f"Containerfile.{i.removeprefix('phalanx-')}" for i in images]
                      + ["torch-worker"])
    check(present == expected, f"deploy/docker holds {present}, expected {expected}")
    torch_ins = containerfile_instructions(os.path.join(docker_dir, "torch-worker", "Containerfile"))
    check("USER 65532:65532" in torch_ins, "torch-worker/Containerfile: USER 65532:65532")
    check(any(i.startswith("RUN python3 -m pip install --no-cache-dir --no-deps /tmp/phalanx-")
              for i in torch_ins), "torch-worker/Containerfile: the wheel's one pip line")
    for image, binary in images.items():
        check(os.path.basename(binary) == image, f"{image}: binary {binary} has another name")
        path = os.path.join(docker_dir, f"Containerfile.{image.removeprefix('phalanx-')}")
        ins = containerfile_instructions(path)
        froms = [i for i in ins if i.upper().startswith("FROM ")]
        check(froms == ["FROM scratch"], f"{path}: one stage, FROM scratch (no base image can be pulled)")
        check(not any(i.upper().startswith("RUN ") for i in ins), f"{path}: RUN in a scratch image")
        check("COPY rootfs/ /" in ins, f"{path}: COPY rootfs/ / (the context build-images.sh stages)")
        check("USER 65532:65532" in ins, f"{path}: USER 65532:65532")
        check(f'ENTRYPOINT ["/usr/local/bin/{image}"]' in ins, f"{path}: ENTRYPOINT /usr/local/bin/{image}")
        env = " ".join(i for i in ins if i.startswith("ENV "))
        check(re.search(r"PATH=(\S*:)?/usr/local/bin(:|\s|$)", env), f"{path}: /usr/local/bin on PATH")
        labels = " ".join(i for i in ins if i.startswith("LABEL "))
        for key in OCI_LABELS:
            check(f"org.opencontainers.image.{key}=" in labels, f"{path}: label org.opencontainers.image.{key}")
        check(f'org.opencontainers.image.title="{image}"' in labels, f"{path}: title {image}")
        for arg in ("VERSION", "REVISION"):
            check(f"${{{arg}}}" in labels and any(i.startswith(f"ARG {arg}") for i in ins),
                  f"{path}: ARG {arg} feeds a label")

    # The chart's defaults name exactly these images, in the same registry, at the same tag.
    version = project_version(src)
    chart, values = chart_files(src)
    check(str(chart["appVersion"]) == version,
          f"Chart.yaml appVersion {chart['appVersion']!r} != CMake project version {version!r}: "
          "the chart's default image tag must be the images' tag")
    check(values["global"]["imageRegistry"] == registry,
          f"values.yaml global.imageRegistry {values['global']['imageRegistry']} != "
          f"build-images.sh's default {registry}")
    for component in ("operator", "agent", "coordinator"):
        repo = values[component]["image"]["repository"]
        check(repo in images, f"values.yaml {component}.image.repository {repo} is no image build-images.sh builds")
        check(not values[component]["image"].get("tag"), f"values.yaml {component}.image.tag overrides appVersion")
    check(values["coordinator"]["command"] in ("phalanx-coordinator", "/usr/local/bin/phalanx-coordinator"),
          "values.yaml coordinator.command is not the coordinator image's binary")
    # The examples name images a user can have: those `make images` builds, at the same tag
    # (once examples/trainingjob.yaml named phalanx/sample-worker:dev, which nothing built).
    built = {f"{registry}/{i}:{version}" for i in list(images) + ["phalanx-torch-worker"]}
    examples = os.path.join(src, "examples")
    for name in sorted(os.listdir(examples)):
        if name.endswith(".yaml"):
            refs = re.findall(r"^\s*image:\s*(\S+)", open(os.path.join(examples, name)).read(),
                              re.M)
            check(refs, f"examples/{name} names no image")
            for ref in refs:
                check(ref in built, f"examples/{name}: image {ref} is not one `make images` builds "
                                    f"({sorted(built)})")
    print(f"{len(images)} Containerfiles, chart images {registry}/<name>:{version}")


# ---------------------------------------------------------------------------------------------

def main():
    if len(sys.argv) != 4:
        print(__doc__)
        return 2
    src, binary_dir, what = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2]), sys.argv[3]
    checks = {"render": check_render, "apply": check_apply, "sync": check_sync,
              "metrics": check_metrics, "containerfiles": check_containerfiles}
    if what not in checks:
        print(f"unknown check {what}; one of {sorted(checks)}")
        return 2
    args = [src, binary_dir]
    if what in ("render", "apply"):
        helm = find_helm(src)
        if helm is None:
            return SKIP
        args.append(helm)
    try:
        checks[what](*args)
    except Failure as e:
        print(f"FAIL ({what}): {e}")
        return 1
    print(f"PASS ({what})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
