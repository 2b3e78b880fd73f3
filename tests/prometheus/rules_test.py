#!/usr/bin/env python3
"""The alert rules against a real rule engine: Debian's promtool (package prometheus).

  rules_test.py SOURCE_DIR

1. `promtool check rules` on deploy/alerts/phalanx-rules.yaml;
2. `promtool test rules` on tests/prometheus/phalanx-rules_test.yaml (every alert's cases);
3. every alert in the rules has a case where it fires and one where it stays quiet;
4. the tests can fail: PhalanxJobFailed as it was before issue 32 (a delta of the count of
   Failed jobs, blind to a job's first failure) is planted in a copy of the rules, and the same
   tests must refuse it;
5. the dashboard (dashboard_check.py): a `datasource` variable every query uses, and every
   PromQL query parses with promtool (a planted broken one is caught).

Exit 0 pass, 1 fail, 77 skipped (no promtool: `apt-get install prometheus`, which
scripts/install-deps.sh does). Standard library plus PyYAML.
"""
import os
import shutil
import subprocess
import sys
import tempfile

try:
    import yaml
except ImportError:
    if sys.executable != "/usr/bin/python3" and os.access("/usr/bin/python3", os.X_OK):
        os.execv("/usr/bin/python3", ["/usr/bin/python3", *sys.argv])
    sys.exit("rules_test.py needs PyYAML: apt-get install python3-yaml")

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dashboard_check  # noqa: E402

SKIP = 77
RULES = os.path.join("deploy", "alerts", "phalanx-rules.yaml")
TESTS = os.path.join("tests", "prometheus", "phalanx-rules_test.yaml")
# What PhalanxJobFailed replaced: it could not fire until a Failed series existed.
BLIND_JOBS_FAILING = 'delta(sum(phalanx_operator_job_phase{phase="Failed"})[1h:1m]) > 0'


def promtool(*args, cwd=None):
    return subprocess.run(["promtool", *args], capture_output=True, text=True, timeout=120, cwd=cwd)


def main():
    src = sys.argv[1]
    if shutil.which("promtool") is None:
        print("skipped: promtool is not installed (apt-get install prometheus; "
              "scripts/install-deps.sh installs it)")
        return SKIP
    failures = []

    r = promtool("check", "rules", os.path.join(src, RULES))
    print(r.stdout + r.stderr)
    if r.returncode != 0:
        failures.append("promtool check rules failed")

    r = promtool("test", "rules", os.path.join(src, TESTS))
    print(r.stdout + r.stderr)
    if r.returncode != 0:
        failures.append("promtool test rules failed")

    with open(os.path.join(src, RULES)) as f:
        rules = yaml.safe_load(f)
    with open(os.path.join(src, TESTS)) as f:
        tests = yaml.safe_load(f)
    alerts = [r["alert"] for g in rules["groups"] for r in g["rules"] if "alert" in r]
    fires, quiet = set(), set()
    for t in tests["tests"]:
        for case in t.get("alert_rule_test", []):
            (fires if case.get("exp_alerts") else quiet).add(case["alertname"])
    for alert in alerts:
        if alert not in fires:
            failures.append(f"{alert}: no test case where it fires")
        if alert not in quiet:
            failures.append(f"{alert}: no test case where it stays quiet")
    unknown = (fires | quiet) - set(alerts)
    if unknown:
        failures.append(f"test cases for alerts the rules do not have: {sorted(unknown)}")
    print(f"{len(alerts)} alerts, each tested firing and quiet")

    # The planted regression: the same tests against a copy of the rules with the old, blind
    # expression must fail, and name PhalanxJobFailed.
    with tempfile.TemporaryDirectory(prefix="phalanx-rules-") as tmp:
        for g in rules["groups"]:
            for rule in g["rules"]:
                if rule.get("alert") == "PhalanxJobFailed":
                    rule["expr"] = BLIND_JOBS_FAILING
        os.makedirs(os.path.join(tmp, "deploy", "alerts"))
        os.makedirs(os.path.join(tmp, "tests", "prometheus"))
        with open(os.path.join(tmp, RULES), "w") as f:
            yaml.safe_dump(rules, f)
        shutil.copy(os.path.join(src, TESTS), os.path.join(tmp, TESTS))
        r = promtool("test", "rules", TESTS, cwd=tmp)
        if r.returncode == 0 or "PhalanxJobFailed" not in r.stdout + r.stderr:
            failures.append("the rule tests did not catch PhalanxJobFailed blind to a first "
                            "failure:\n" + r.stdout + r.stderr)
        else:
            print("a PhalanxJobFailed blind to a job's first failure is caught")

    failures += dashboard_check.check_dashboard(src)

    for f in failures:
        print("FAIL:", f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
