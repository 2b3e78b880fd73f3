"""Debian's real Prometheus against a running Phalanx (issue 32, item 1): it scrapes the targets
kube_sd.py discovers with the chart's monitors, evaluates the shipped alert rules, and then every
query of the dashboard and every alert is checked against what it collected.

  with LivePrometheus(work_dir, scrape_configs, rules_file) as prom:
      ... the job goes through its faults ...
      problems = check_everything(prom, dashboard, expected_alerts)
"""
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from dashboard_check import substitute  # noqa: E402 (Grafana's variables, as Grafana fills them)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "deploy"))
from deploy_test import dashboard_exprs  # noqa: E402

# Dashboard queries that return nothing when nothing went wrong in their own way (a series that
# exists only once the thing happens, or a filter for the bad case); any other empty answer is
# a broken query, a missing metric or a target Prometheus did not find.
MAY_BE_EMPTY = {
    "phalanx_agent_check_ok": "lists failing node checks only (== 0)",
    "phalanx_agent_xid_errors_total": "a series per XID seen; the fake GPUs report none",
    "phalanx_agent_notice_source_errors_total": "a series per notice source that failed",
    "phalanx_agent_notices_total": "a series per node notice seen (a scheduler's preemption is "
                                   "none)",
    'phalanx_coordinator_rpcs_total{code!="OK"}': "only failed RPCs",
    "phalanx_coordinator_barrier_timeouts_total": "a series per job with a barrier timeout",
}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LivePrometheus:
    """A Prometheus process on loopback with `scrape_configs` and the rules in `rules_file`
    (evaluated every second), its data in `work_dir`; stopped on exit, also on failure."""

    def __init__(self, work_dir, scrape_configs, rules_file=None):
        self.binary = shutil.which("prometheus")
        self.dir = work_dir
        os.makedirs(work_dir, exist_ok=True)
        config = {"global": {"scrape_interval": "2s", "evaluation_interval": "1s"},
                  "scrape_configs": scrape_configs}
        if rules_file:
            config["rule_files"] = [os.path.abspath(rules_file)]
        self.config = os.path.join(work_dir, "prometheus.yml")
        with open(self.config, "w") as f:
            json.dump(config, f, indent=1)  # JSON is YAML
        self.port = free_port()
        self.proc = None

    def __enter__(self):
        self.log = open(os.path.join(self.dir, "prometheus.log"), "w")
        try:
            self.proc = subprocess.Popen(
                [self.binary, "--config.file", self.config,
                 "--storage.tsdb.path", os.path.join(self.dir, "tsdb"),
                 "--web.listen-address", f"127.0.0.1:{self.port}", "--log.level", "warn"],
                stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)
        except OSError:
            self.log.close()
            raise
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(self.url("/-/ready"), timeout=2) as r:
                    if r.status == 200:
                        return self
            except OSError:
                pass
            if self.proc.poll() is not None:
                break
            time.sleep(0.2)
        self.__exit__(None, None, None)
        raise RuntimeError("prometheus did not become ready within 60 s: "
                           + open(os.path.join(self.dir, "prometheus.log")).read()[-2000:])

    def __exit__(self, *exc):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self.log.close()

    def url(self, path):
        return f"http://127.0.0.1:{self.port}{path}"

    def api(self, path, **params):
        query = ("?" + urllib.parse.urlencode(params)) if params else ""
        with urllib.request.urlopen(self.url("/api/v1/" + path + query), timeout=20) as r:
            body = json.loads(r.read().decode())
        if body.get("status") != "success":
            raise RuntimeError(f"{path}: {body}")
        return body["data"]

    def query(self, expr):
        """The instant vector (or scalar) `expr` gives now: a list of results."""
        data = self.api("query", query=expr)
        return data["result"] if data["resultType"] in ("vector", "matrix") else [data["result"]]

    def targets_up(self):
        """{job label: [target health, ...]} of the active targets."""
        jobs = {}
        for t in self.api("targets")["activeTargets"]:
            jobs.setdefault(t["labels"].get("job", ""), []).append(t["health"])
        return jobs

    def alerts(self):
        """{alert name: (state, health, lastError)} of the loaded alerting rules."""
        out = {}
        for group in self.api("rules")["groups"]:
            for rule in group["rules"]:
                if rule.get("type") == "alerting":
                    out[rule["name"]] = (rule.get("state"), rule.get("health"),
                                         rule.get("lastError", ""))
        return out


def dashboard_problems(prom, dashboard):
    """Every dashboard query, evaluated: those that fail, and those that return nothing without
    a reason to (MAY_BE_EMPTY). Returns (problems, report lines)."""
    problems, report = [], []
    for where, expr in dashboard_exprs(dashboard):
        try:
            result = prom.query(substitute(expr))
        except Exception as e:  # noqa: BLE001 - named below
            problems.append(f"{where}: {expr!r} failed: {e}")
            continue
        excuse = next((why for key, why in MAY_BE_EMPTY.items() if key in expr), None)
        report.append(f"{len(result):3d} series  {where}: {expr[:90]}")
        if not result and excuse is None:
            problems.append(f"{where}: {expr!r} returned no data")
    return problems, report


def alert_problems(prom, expected_firing, allow_inactive=False):
    """Every alert loaded and evaluated without error; those in `expected_firing` are pending
    or firing (or inactive too, with `allow_inactive`), every other one inactive. Returns
    (problems, report lines)."""
    problems, report = [], []
    alerts = prom.alerts()
    if not alerts:
        return ["no alerting rules loaded"], report
    for name, (state, health, error) in sorted(alerts.items()):
        report.append(f"{name}: {state} ({health})")
        if health != "ok":
            problems.append(f"alert {name}: evaluation {health}: {error}")
        active = state in ("pending", "firing")
        if name in expected_firing and allow_inactive:
            continue
        if (name in expected_firing) != active:
            problems.append(f"alert {name}: {state}, expected "
                            f"{'pending or firing' if name in expected_firing else 'inactive'}")
    return problems, report
