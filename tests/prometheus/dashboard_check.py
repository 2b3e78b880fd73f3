"""The Grafana dashboard's shape and queries (issue 32, item 5), for rules_test.py.

No Grafana runs here, so what can be checked without one is: the dashboard asks for a
Prometheus data source through a `datasource` variable and every query uses it; and every PromQL
expression (the panels' targets and the query variables' label_values(...) selectors) parses
with the real rule engine's parser (`promtool check rules` on a recording rule per expression),
with Grafana's variables replaced by values of the right kind first.
"""
import json
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "deploy"))
from deploy_test import all_panels, dashboard_exprs  # noqa: E402 (the metrics check walks the same)

DASHBOARD = os.path.join("deploy", "dashboards", "phalanx.json")
DATASOURCE_UID = "${datasource}"
# What Grafana puts in place of its variables: durations for the interval ones; any other
# variable sits in a label matcher (=~"$node"), where a regex is what it becomes.
GRAFANA_DURATIONS = {"__rate_interval": "5m", "__interval": "1m", "__range": "1h"}


def substitute(expr):
    def value(m):
        name = m.group(1) or m.group(2)
        return GRAFANA_DURATIONS.get(name, ".*")
    return re.sub(r"\$\{(\w+)\}|\$(\w+)", value, expr)


def shape_problems(dash):
    problems = []
    variables = {v.get("name"): v for v in dash.get("templating", {}).get("list", [])}
    ds = variables.get("datasource")
    if not ds or ds.get("type") != "datasource" or ds.get("query") != "prometheus":
        problems.append("no `datasource` variable of type datasource querying prometheus")
    for p in all_panels(dash):
        for t in p.get("targets", []):
            for owner in (p, t):
                uid = (owner.get("datasource") or {}).get("uid")
                if uid != DATASOURCE_UID:
                    problems.append(f"panel {p.get('id')}: datasource {uid!r}, not "
                                    f"{DATASOURCE_UID}")
            if not t.get("expr"):
                problems.append(f"panel {p.get('id')} target {t.get('refId')}: no expr")
    return problems


def parse_problems(found, promtool):
    """The queries promtool cannot parse, each named (one rules file, then one per query only
    when that file fails, to say which)."""
    def check(items):
        with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
            rules = [{"record": f"dashboard:query_{i}", "expr": substitute(expr)}
                     for i, (_, expr) in enumerate(items)]
            json.dump({"groups": [{"name": "dashboard", "rules": rules}]}, f)  # JSON is YAML
        try:
            r = promtool("check", "rules", f.name)
        finally:
            os.unlink(f.name)
        return r.returncode == 0, (r.stdout + r.stderr).strip()
    ok, _ = check(found)
    if ok:
        return []
    out = []
    for where, expr in found:
        ok, said = check([(where, expr)])
        if not ok:
            out.append(f"{where}: {expr!r} does not parse: {said.splitlines()[-1]}")
    return out or ["promtool refused the dashboard's queries together, but each alone parses"]


def promtool(*args):
    return subprocess.run(["promtool", *args], capture_output=True, text=True, timeout=120)


def check_dashboard(src):
    """Failures (strings): the shape, every query parsing, and that a broken query is caught."""
    with open(os.path.join(src, DASHBOARD)) as f:
        dash = json.load(f)
    failures = shape_problems(dash)
    found = list(dashboard_exprs(dash))
    failures += parse_problems(found, promtool)
    # The check can fail: a query with an unclosed parenthesis is named.
    planted = parse_problems(found + [("planted", "sum(rate(phalanx_x_total[5m])")], promtool)
    if not any(p.startswith("planted:") for p in planted):
        failures.append(f"a broken query was not caught: {planted}")
    if not failures:
        print(f"dashboard: {len(found)} queries parse with promtool; every target uses "
              f"{DATASOURCE_UID}; a broken query is caught")
    return failures
