#!/usr/bin/env python3
"""Generates known_fields_data.cc: the field names of every built-in kind the local cluster's
built-in API server serves, taken from a REAL kube-apiserver's own /openapi/v3 documents, so that
`fieldValidation=Strict|Warn` can name unknown fields the way kube-apiserver's strict decoder does.

Usage: gen_known_fields.py --server https://127.0.0.1:PORT --token TOKEN [--insecure] > known_fields_data.cc
(or --dir DIR with the documents saved as api_v1.json, apis_apps_v1.json, ...).

Encoding of one field (compact, no descriptions, no types beyond what strict decoding needs):
  ""      a leaf (scalar, or an opaque value such as IntOrString/Quantity/Time)
  "*"     anything goes (x-kubernetes-preserve-unknown-fields, RawExtension, JSON)
  "T"     an object of type T          "[T" a list of T ("[" of leaves)
  "{T"    a map to T ("{" to leaves)
"""
import argparse, json, os, ssl, sys, urllib.request

GROUP_VERSIONS = ["api/v1", "apis/apps/v1", "apis/coordination.k8s.io/v1",
                  "apis/rbac.authorization.k8s.io/v1", "apis/policy/v1",
                  "apis/apiextensions.k8s.io/v1"]
KINDS = {  # apiVersion/Kind the built-in server serves
    "v1": ["Namespace", "Pod", "Service", "Secret", "ConfigMap", "Event", "Node",
           "ServiceAccount", "Endpoints"],
    "apps/v1": ["Deployment", "DaemonSet"],
    "coordination.k8s.io/v1": ["Lease"],
    "rbac.authorization.k8s.io/v1": ["Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding"],
    "policy/v1": ["PodDisruptionBudget"],
    "apiextensions.k8s.io/v1": ["CustomResourceDefinition"],
}
OPAQUE = {"io.k8s.apimachinery.pkg.runtime.RawExtension",
          "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.JSON",
          "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.JSONSchemaPropsOrArray",
          "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.JSONSchemaPropsOrBool",
          "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.JSONSchemaPropsOrStringArray"}


def fetch(args):
    docs = {}
    for gv in GROUP_VERSIONS:
        if args.dir:
            with open(os.path.join(args.dir, gv.replace("/", "_") + ".json")) as f:
                docs[gv] = json.load(f)
            continue
        ctx = ssl.create_default_context()
        if args.insecure:
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        req = urllib.request.Request(f"{args.server}/openapi/v3/{gv}",
                                     headers={"Authorization": f"Bearer {args.token}"})
        with urllib.request.urlopen(req, context=ctx) as r:
            docs[gv] = json.load(r)
    return docs


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--server")
    ap.add_argument("--token")
    ap.add_argument("--insecure", action="store_true")
    ap.add_argument("--dir")
    args = ap.parse_args()
    schemas = {}
    version = ""
    for doc in fetch(args).values():
        schemas.update(doc["components"]["schemas"])
        version = doc.get("info", {}).get("version", version)

    def ref_of(s):
        if "$ref" in s:
            return s["$ref"].split("/")[-1]
        for a in s.get("allOf", []):
            if "$ref" in a:
                return a["$ref"].split("/")[-1]
        return None

    types = {}

    def encode(s):
        if s.get("x-kubernetes-preserve-unknown-fields"):
            return "*"
        r = ref_of(s)
        if r:
            if r in OPAQUE:
                return "*"
            target = schemas[r]
            if "properties" not in target:
                return "*" if target.get("type") == "object" and "additionalProperties" not in target else ""
            visit(r)
            return r
        t = s.get("type")
        if t == "array":
            inner = encode(s.get("items", {}))
            return "[" + inner
        if t == "object" and "additionalProperties" in s:
            ap_ = s["additionalProperties"]
            return "{" + (encode(ap_) if isinstance(ap_, dict) else "")
        if t == "object" and "properties" not in s:
            return "*"
        return ""

    def visit(name):
        if name in types:
            return
        types[name] = None
        props = schemas[name].get("properties", {})
        types[name] = {k: encode(v) for k, v in sorted(props.items())}

    kinds = {}
    for name, s in schemas.items():
        for gvk in s.get("x-kubernetes-group-version-kind", []):
            api_version = (gvk["group"] + "/" if gvk["group"] else "") + gvk["version"]
            if gvk["kind"] in KINDS.get(api_version, []) and "properties" in s:
                visit(name)
                kinds[api_version + "/" + gvk["kind"]] = name
    missing = [f"{av}/{k}" for av, ks in KINDS.items() for k in ks if f"{av}/{k}" not in kinds]
    if missing:
        sys.exit(f"kinds not found in the OpenAPI documents: {missing}")
    data = json.dumps({"source": f"kube-apiserver {version} /openapi/v3", "kinds": kinds,
                       "types": types}, separators=(",", ":"), sort_keys=True)
    chunks = [data[i:i + 12000] for i in range(0, len(data), 12000)]
    print("// Generated by tests/localcluster/gen_known_fields.py from a real kube-apiserver's")
    print(f"// /openapi/v3 documents ({version}). Do not edit; re-run the script.")
    print('#include "tests/localcluster/known_fields.h"\n')
    print("namespace phalanx::localcluster {\n")
    print("const char* const kKnownFieldsJson[] = {")
    for c in chunks:
        print(f'    R"phx({c})phx",')
    print("    nullptr};\n")
    print("}  // namespace phalanx::localcluster")


if __name__ == "__main__":
    main()
