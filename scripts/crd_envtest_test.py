#!/usr/bin/env python3
"""The TrainingJob CRD on a real kube-apiserver (v1.26 from the envtest assets; issue 11).

What only a real API server can tell (the local cluster's built-in server has no CEL and no
PodSecurity admission):
  - the CRD is accepted at all: the server checks every CEL rule against every `default` in the
    schema as written (a rule that reads a field the default leaves out is refused);
  - a TrainingJob whose defaulted objects are written out as their defaults (`failurePolicy: {}`)
    passes every rule;
  - every tests/testdata/trainingjob-valid-*.yaml (and examples/trainingjob.yaml) is accepted,
    every trainingjob-invalid-*.yaml is refused with its `# expect:` message;
  - strict field validation refuses typos inside spec.template (the generated PodTemplateSpec
    schema), and the default (Warn) answers with a Warning header;
  - the name rule: 51 characters are fine, 52 or a '.' are refused;
  - the checked-in template schema is what scripts/gen-crd-podtemplate.py makes from this server.

  - the children the operator renders (Secret, Services, coordinator pod, a task pod; dumped by
    operator/controller/desired_state_test with PHALANX_DUMP_CHILDREN_DIR) are accepted with
    fieldValidation=Strict in a namespace that enforces Pod Security "restricted".

Exit 77 (CTest: skipped) when there are no envtest assets or no etcd. Run directly:
  python3 scripts/crd_envtest_test.py [PATH/TO/phalanx_operator_plan_test]
(without the test binary, the children check is skipped.)
"""

import glob
import importlib.util
import subprocess
import tempfile
import json
import os
import sys
import time
import unittest

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import envtest_plane  # noqa: E402

_spec = importlib.util.spec_from_file_location("gen", os.path.join(HERE, "gen-crd-podtemplate.py"))
gen = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gen)

CRD_PATH = os.path.join(ROOT, "crds", "trainingjobs.phalanx.dev.yaml")
TJ = "/apis/phalanx.dev/v1alpha1/namespaces/default/trainingjobs"
PLANE = None
PLAN_TEST = None  # the phalanx_operator_plan_test binary, from argv


def load(path):
    with open(path) as f:
        return yaml.safe_load(f)


def comment_values(path, key):
    prefix = f"# {key}: "
    with open(path) as f:
        return [l[len(prefix):].rstrip("\n") for l in f if l.startswith(prefix)]


def job(name, **spec):
    body = {"replicas": 1, "template": {"spec": {"containers": [
        {"name": "worker", "image": "example.com/worker:1", "command": ["train"]}]}}}
    body.update(spec)
    return {"apiVersion": "phalanx.dev/v1alpha1", "kind": "TrainingJob",
            "metadata": {"name": name}, "spec": body}


def message(answer):
    return answer.get("message", "") if isinstance(answer, dict) else str(answer)


class CrdOnRealApiServer(unittest.TestCase):
    def create(self, obj, query=""):
        return PLANE.request("POST", TJ + query, obj)

    def assertCreated(self, obj, query=""):
        status, answer, headers = self.create(obj, query)
        self.assertEqual(status, 201, message(answer))
        PLANE.request("DELETE", f"{TJ}/{obj['metadata']['name']}")
        return answer, headers

    def assertRefused(self, obj, expect, query=""):
        status, answer, _ = self.create(obj, query)
        self.assertIn(status, (400, 422), f"{obj['metadata']['name']} accepted")
        self.assertIn(expect, message(answer))

    def test_defaults_as_written_pass_every_rule(self):
        # Each defaulted object of the spec written out as its default, alone and all together.
        spec = load(CRD_PATH)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
        props = spec["properties"]["spec"]["properties"]
        defaulted = {k: v["default"] for k, v in props.items() if "default" in v}
        self.assertIn("failurePolicy", defaulted)
        for i, (key, value) in enumerate(sorted(defaulted.items())):
            with self.subTest(field=key):
                self.assertCreated(job(f"default-{i}", **{key: value}))
        self.assertCreated(job("all-defaults", **defaulted))
        self.assertCreated(job("nested-defaults", failurePolicy={"backoff": {}}))

    def test_testdata_manifests(self):
        valid = sorted(glob.glob(os.path.join(ROOT, "tests", "testdata", "trainingjob-valid-*.yaml")))
        valid.extend(sorted(glob.glob(os.path.join(ROOT, "examples", "trainingjob*.yaml"))))
        for path in valid:
            with self.subTest(manifest=os.path.basename(path)):
                self.assertCreated(load(path), "?fieldValidation=Strict")
        invalid = sorted(glob.glob(os.path.join(ROOT, "tests", "testdata",
                                                "trainingjob-invalid-*.yaml")))
        self.assertTrue(invalid)
        for path in invalid:
            with self.subTest(manifest=os.path.basename(path)):
                expect = comment_values(path, "expect-real") or comment_values(path, "expect")
                self.assertRefused(load(path), expect[0], "?fieldValidation=Strict")

    def test_template_typos_are_refused_under_strict_and_warned_about_otherwise(self):
        bad = job("typo")
        bad["spec"]["template"]["spec"]["containers"][0]["comand"] = ["train"]
        bad["spec"]["template"]["spec"]["containers"][0]["resouces"] = {}
        self.assertRefused(bad, 'unknown field "spec.template.spec.containers[0].comand"',
                           "?fieldValidation=Strict")
        _, headers = self.assertCreated(bad)  # no fieldValidation: the server's default, Warn
        warnings = [v for k, v in headers if k.lower() == "warning"]
        self.assertTrue(any("comand" in w for w in warnings), warnings)

    def test_template_fields_of_the_pod_api_are_kept(self):
        good = job("kept")
        c = good["spec"]["template"]["spec"]["containers"][0]
        c["resources"] = {"limits": {"cpu": 0.5, "memory": "1Gi", "nvidia.com/gpu": 8}}
        c["ports"] = [{"containerPort": 29500}]
        c["readinessProbe"] = {"tcpSocket": {"port": "grpc"}}
        good["spec"]["template"]["metadata"] = {"labels": {"team": "a"},
                                                "annotations": {"x": "y"}}
        created, _ = self.assertCreated(good, "?fieldValidation=Strict")
        got = created["spec"]["template"]
        self.assertEqual(got["metadata"], good["spec"]["template"]["metadata"])
        kept = got["spec"]["containers"][0]
        self.assertEqual(kept["resources"], c["resources"])
        self.assertEqual(kept["ports"], [{"containerPort": 29500, "protocol": "TCP"}])
        self.assertEqual(kept["readinessProbe"], c["readinessProbe"])

    def test_name_limits(self):
        self.assertCreated(job("n" * 51))
        self.assertRefused(job("n" * 52), "metadata.name must be at most 51 characters")
        self.assertRefused(job("has.dot"), "metadata.name must start with a lowercase letter")

    def test_exit_code_rule_still_bites(self):
        self.assertRefused(job("both", failurePolicy={"fatalExitCodes": [3],
                                                      "retryableExitCodes": [3]}),
                           "an exit code cannot be both fatal and retryable")

    def test_operator_children_pass_strict_validation_and_pod_security_restricted(self):
        if not PLAN_TEST:
            self.skipTest("no phalanx_operator_plan_test binary given")
        ns = {"apiVersion": "v1", "kind": "Namespace", "metadata": {
            "name": "restricted", "labels": {"pod-security.kubernetes.io/enforce": "restricted"}}}
        status, answer, _ = PLANE.request("POST", "/api/v1/namespaces", ns)
        self.assertIn(status, (201, 409), message(answer))
        # No controller manager runs here to make the namespace's default ServiceAccount.
        sa = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default"}}
        PLANE.request("POST", "/api/v1/namespaces/restricted/serviceaccounts", sa)
        with tempfile.TemporaryDirectory() as out:
            run = subprocess.run([PLAN_TEST, "--gtest_filter=DesiredChildren.*"],
                                 env=dict(os.environ, PHALANX_DUMP_CHILDREN_DIR=out),
                                 capture_output=True, text=True)
            self.assertEqual(run.returncode, 0, run.stdout + run.stderr)
            names = sorted(os.listdir(out))
            self.assertEqual(len(names), 7, names)
            for name in names:
                with open(os.path.join(out, name)) as f:
                    obj = json.load(f)
                # No real owner exists here; the reference's shape is not what is checked.
                obj["metadata"].pop("ownerReferences", None)
                plural = {"Secret": "secrets", "Service": "services", "Pod": "pods",
                          "NetworkPolicy": "networkpolicies"}[obj["kind"]]
                prefix = "/apis/networking.k8s.io/v1" if plural == "networkpolicies" else "/api/v1"
                with self.subTest(child=name):
                    status, answer, headers = PLANE.request(
                        "POST", f"{prefix}/namespaces/restricted/{plural}?fieldValidation=Strict",
                        obj)
                    self.assertEqual(status, 201, message(answer))
                    warnings = [v for k, v in headers if k.lower() == "warning"]
                    self.assertEqual(warnings, [], name)

    def test_checked_in_template_schema_is_what_the_generator_makes_from_this_server(self):
        status, doc, _ = PLANE.request("GET", "/openapi/v3/api/v1")
        self.assertEqual(status, 200)
        template, _ = gen.generate(doc)
        status, version, _ = PLANE.request("GET", "/version")
        minor = version.get("minor", "").rstrip("+") if status == 200 else ""
        if minor != GENERATED_FROM_MINOR:
            # The schema is generated from the oldest supported server (1.26), so it must be a
            # subset of a newer one's: every field it knows, the newer server knows too. The
            # newer server's own additions (e.g. 1.28's resizePolicy) are not in the CRD: a
            # TrainingJob's template cannot use them (strict validation refuses them).
            with open(CRD_PATH) as f:
                crd = yaml.safe_load(f)
            ours = (crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
                    ["properties"]["template"])
            missing, added = [], []
            compare_properties(ours, template, "template", missing, added)
            self.assertEqual(missing, [], f"fields of the CRD's template this 1.{minor} server "
                             "does not have")
            print(f"\n  1.{minor}: the CRD's template (from 1.{GENERATED_FROM_MINOR}) is a subset; "
                  f"{len(added)} newer fields not in it, e.g. {', '.join(added[:4])}")
            return
        for path in gen.CRD_FILES:
            with open(path) as f:
                text = f.read()
            self.assertEqual(gen.splice(text, template), text,
                             f"{path} is stale: run scripts/gen-crd-podtemplate.py")
            self.assertLess(gen.annotation_bytes(text), gen.ANNOTATION_LIMIT)


# The checked-in spec.template schema is generated from this Kubernetes minor (../shared/envtest).
GENERATED_FROM_MINOR = "26"


def compare_properties(ours, theirs, path, missing, added):
    """Walks two structural schemas: fields only in `ours` go to missing, only in `theirs` to added."""
    ours_p = ours.get("properties", {})
    theirs_p = theirs.get("properties", {})
    for name in ours_p:
        if name not in theirs_p:
            missing.append(f"{path}.{name}")
        else:
            compare_properties(ours_p[name], theirs_p[name], f"{path}.{name}", missing, added)
    added.extend(f"{path}.{name}" for name in theirs_p if name not in ours_p)
    if "items" in ours and "items" in theirs:
        compare_properties(ours["items"], theirs["items"], path + "[]", missing, added)
    if isinstance(ours.get("additionalProperties"), dict) and isinstance(
            theirs.get("additionalProperties"), dict):
        compare_properties(ours["additionalProperties"], theirs["additionalProperties"],
                           path + "{}", missing, added)


def main():
    global PLANE, PLAN_TEST
    if len(sys.argv) > 1 and not sys.argv[1].startswith("-"):
        PLAN_TEST = sys.argv.pop(1)
    try:
        with envtest_plane.ControlPlane() as plane:
            PLANE = plane
            with open(CRD_PATH) as f:
                crd = yaml.safe_load(f)
            status, answer, _ = plane.request(
                "POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd)
            if status != 201:
                print(f"FAIL: the CRD is refused: HTTP {status}: {message(answer)}")
                return 1
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                s, _, _ = plane.request("GET", TJ)
                if s == 200:
                    break
                time.sleep(0.2)
            result = unittest.main(argv=[sys.argv[0]] + sys.argv[1:], exit=False).result
            return 0 if result.wasSuccessful() else 1
    except envtest_plane.Unavailable as e:
        print(f"SKIP: no real control plane here: {e}")
        return 77


if __name__ == "__main__":
    sys.exit(main())
