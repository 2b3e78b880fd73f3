"""A real Prometheus scraping Phalanx the way the chart tells a Prometheus Operator to (issue 32,
item 1), for a Prometheus without Kubernetes service discovery.

Debian's prometheus 2.42 is built without `kubernetes_sd_configs` (promtool: "field
kubernetes_sd_configs not found"), so two halves stand in for it:

- `scrape_configs(monitors, sd_dir)`: the chart's ServiceMonitors and PodMonitors (as `helm
  template` renders them) turned into the scrape jobs the Prometheus Operator would generate:
  its keep rules (the selector's labels, the port's name, the namespaces), its target labels
  (namespace, service, pod, container, job, endpoint), then the monitor's own relabelings and
  honorLabels. Only the discovery differs: each job reads `file_sd_configs` from `sd_dir`.
- `KubeTargets`: the discovery. It lists Endpoints (with their Services and Pods) and Pods from
  the API server (kubectl) and writes what Kubernetes discovery would hand Prometheus for the
  roles `endpoints` and `pod`: an `__address__` per port and the `__meta_kubernetes_*` labels.

So the selection and every relabeling are Prometheus's own, run on the chart's words.
"""
import json
import os
import re
import threading

ROLE_FILE = {"endpoints": "endpoints.json", "pod": "pods.json"}


def _label_name(name):
    """Prometheus's sanitizing of a Kubernetes label key into a label name."""
    return re.sub(r"[^a-zA-Z0-9_]", "_", name)


def _labels(prefix, labels):
    out = {}
    for key, value in (labels or {}).items():
        out[f"{prefix}_label_{_label_name(key)}"] = value
        out[f"{prefix}_labelpresent_{_label_name(key)}"] = "true"
    return out


def _relabelings(relabelings):
    """A monitor's relabelings (camelCase, as the CRDs spell them) in Prometheus's own words."""
    names = {"sourceLabels": "source_labels", "targetLabel": "target_label"}
    return [{names.get(k, k): v for k, v in r.items()} for r in relabelings or []]


def _namespaces(monitor):
    selector = monitor["spec"].get("namespaceSelector") or {}
    if selector.get("any"):
        return None
    return selector.get("matchNames") or [monitor["metadata"]["namespace"]]


def _keep(source, regex):
    return {"source_labels": [source], "regex": regex, "action": "keep"}


def scrape_configs(monitors, sd_dir):
    """One scrape job per monitor endpoint, as the Prometheus Operator names and builds them."""
    jobs = []
    for m in monitors:
        kind, ns, name = m["kind"], m["metadata"]["namespace"], m["metadata"]["name"]
        role = "endpoints" if kind == "ServiceMonitor" else "pod"
        meta = "__meta_kubernetes_service" if role == "endpoints" else "__meta_kubernetes_pod"
        endpoints = m["spec"].get("endpoints") or m["spec"].get("podMetricsEndpoints") or []
        for i, e in enumerate(endpoints):
            relabel = [_keep(f"{meta}_label_{_label_name(k)}", v)
                       for k, v in m["spec"]["selector"].get("matchLabels", {}).items()]
            namespaces = _namespaces(m)
            if namespaces is not None:
                relabel.append(_keep("__meta_kubernetes_namespace", "|".join(namespaces)))
            port_label = ("__meta_kubernetes_endpoint_port_name" if role == "endpoints"
                          else "__meta_kubernetes_pod_container_port_name")
            relabel.append(_keep(port_label, e["port"]))
            targets = [("__meta_kubernetes_namespace", "namespace"),
                       ("__meta_kubernetes_pod_name", "pod"),
                       ("__meta_kubernetes_pod_container_name", "container")]
            if role == "endpoints":
                targets.append(("__meta_kubernetes_service_name", "service"))
                targets.append(("__meta_kubernetes_service_name", "job"))
            relabel += [{"source_labels": [s], "target_label": t} for s, t in targets]
            if role == "pod":
                relabel.append({"target_label": "job", "replacement": f"{ns}/{name}"})
            relabel.append({"target_label": "endpoint", "replacement": e["port"]})
            relabel += _relabelings(e.get("relabelings"))
            jobs.append({
                "job_name": f"{'serviceMonitor' if role == 'endpoints' else 'podMonitor'}/"
                            f"{ns}/{name}/{i}",
                "honor_labels": bool(e.get("honorLabels", False)),
                "scrape_interval": e.get("interval", "30s"),
                "metrics_path": e.get("path", "/metrics"),
                "file_sd_configs": [{"files": [os.path.join(sd_dir, ROLE_FILE[role])],
                                     "refresh_interval": "1s"}],
                "relabel_configs": relabel,
            })
    return jobs


def _pod_meta(pod):
    meta, spec, status = pod["metadata"], pod.get("spec", {}), pod.get("status", {})
    ready = any(c.get("type") == "Ready" and c.get("status") == "True"
                for c in status.get("conditions", []))
    out = {"__meta_kubernetes_namespace": meta["namespace"],
           "__meta_kubernetes_pod_name": meta["name"],
           "__meta_kubernetes_pod_ip": status.get("podIP", ""),
           "__meta_kubernetes_pod_node_name": spec.get("nodeName", ""),
           "__meta_kubernetes_pod_phase": status.get("phase", ""),
           "__meta_kubernetes_pod_ready": "true" if ready else "false"}
    out.update(_labels("__meta_kubernetes_pod", meta.get("labels")))
    return out


def pod_targets(pods):
    """Role `pod`: a target per declared container port of every pod with an IP."""
    groups = []
    for pod in pods:
        ip = pod.get("status", {}).get("podIP")
        if not ip or pod.get("status", {}).get("phase") in ("Succeeded", "Failed"):
            continue
        for c in pod["spec"].get("containers", []):
            for p in c.get("ports", []):
                labels = dict(_pod_meta(pod), __meta_kubernetes_pod_container_name=c["name"],
                              __meta_kubernetes_pod_container_port_name=p.get("name", ""),
                              __meta_kubernetes_pod_container_port_number=str(
                                  p["containerPort"]))
                groups.append({"targets": [f"{ip}:{p['containerPort']}"], "labels": labels})
    return groups


def endpoint_targets(endpoints, services, pods):
    """Role `endpoints`: a target per address and port of every Endpoints object, with its
    Service's labels and, where the address is a pod, the pod's."""
    services = {(s["metadata"]["namespace"], s["metadata"]["name"]): s for s in services}
    pods = {(p["metadata"]["namespace"], p["metadata"]["name"]): p for p in pods}
    groups = []
    for ep in endpoints:
        ns, name = ep["metadata"]["namespace"], ep["metadata"]["name"]
        service = services.get((ns, name), {"metadata": {}})
        base = {"__meta_kubernetes_namespace": ns, "__meta_kubernetes_service_name": name,
                "__meta_kubernetes_endpoints_name": name}
        base.update(_labels("__meta_kubernetes_service", service["metadata"].get("labels")))
        for subset in ep.get("subsets") or []:
            addresses = [(a, "true") for a in subset.get("addresses", [])] + [
                (a, "false") for a in subset.get("notReadyAddresses", [])]
            for address, ready in addresses:
                ref = address.get("targetRef") or {}
                pod = pods.get((ns, ref.get("name"))) if ref.get("kind") == "Pod" else None
                for port in subset.get("ports", []):
                    labels = dict(base, __meta_kubernetes_endpoint_ready=ready,
                                  __meta_kubernetes_endpoint_port_name=port.get("name", ""),
                                  __meta_kubernetes_endpoint_address_target_kind=ref.get(
                                      "kind", ""),
                                  __meta_kubernetes_endpoint_address_target_name=ref.get(
                                      "name", ""))
                    if address.get("nodeName"):
                        labels["__meta_kubernetes_endpoint_node_name"] = address["nodeName"]
                    if pod is not None:
                        labels.update(_pod_meta(pod))
                        container = next(
                            (c["name"] for c in pod["spec"].get("containers", [])
                             if any(p.get("containerPort") == port.get("port")
                                    for p in c.get("ports", []))), "")
                        labels["__meta_kubernetes_pod_container_name"] = container
                    groups.append({"targets": [f"{address['ip']}:{port['port']}"],
                                   "labels": labels})
    return groups


def _write(path, groups):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(groups, f)
    os.replace(tmp, path)  # Prometheus never reads half a file


class KubeTargets:
    """The discovery: every `period` seconds, the cluster's Endpoints, Services and Pods as
    file_sd target groups in `sd_dir` (roles endpoints and pod). `list_objects()` returns every
    Pod, Endpoints and Service of the cluster (items with their `kind`). Stops with stop(); a
    failed listing keeps the last files."""

    def __init__(self, list_objects, sd_dir, period=2.0):
        self._list, self._dir, self._period = list_objects, sd_dir, period
        self._stop = threading.Event()
        self.refresh()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def refresh(self):
        items = self._list()
        of = lambda kind: [o for o in items if o.get("kind") == kind]  # noqa: E731
        _write(os.path.join(self._dir, ROLE_FILE["pod"]), pod_targets(of("Pod")))
        _write(os.path.join(self._dir, ROLE_FILE["endpoints"]),
               endpoint_targets(of("Endpoints"), of("Service"), of("Pod")))

    def _loop(self):
        while not self._stop.wait(self._period):
            try:
                self.refresh()
            except Exception:  # noqa: BLE001 - an API hiccup: the next round tries again
                pass

    def stop(self):
        self._stop.set()
        self._thread.join(timeout=10)
