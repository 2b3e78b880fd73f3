#include "tests/localcluster/resource_registry.h"

#include "absl/strings/str_cat.h"
#include "common/kube/object_meta.h"

namespace phalanx::localcluster {
namespace {

ResourceType BuiltIn(std::string group, std::string version, std::string plural,
                     std::string singular, std::string kind, bool namespaced, bool status,
                     std::vector<std::string> short_names) {
  ResourceType t;
  t.group = std::move(group);
  t.version = std::move(version);
  t.plural = std::move(plural);
  t.singular = std::move(singular);
  t.kind = std::move(kind);
  t.namespaced = namespaced;
  t.status_subresource = status;
  t.short_names = std::move(short_names);
  t.schema = Json::null();
  return t;
}

std::string GroupVersion(const std::string& group, const std::string& version) {
  return group.empty() ? version : group + "/" + version;
}

Json StringArray(const std::vector<std::string>& values) {
  Json out = Json::array();
  for (size_t i = 0; i < values.size(); ++i) out[i] = Json::string(values[i]);
  return out;
}

const Json* FieldOf(const Json& object, const char* key) {
  return object.is_object() && object.has_field(key) ? &object.at(key) : nullptr;
}

}  // namespace

ResourceRegistry::ResourceRegistry() {
  absl::MutexLock lock(&mu_);
  AddLocked(BuiltIn("", "v1", "namespaces", "namespace", "Namespace", false, true, {"ns"}));
  AddLocked(BuiltIn("", "v1", "pods", "pod", "Pod", true, true, {"po"}));
  AddLocked(BuiltIn("", "v1", "services", "service", "Service", true, true, {"svc"}));
  AddLocked(BuiltIn("", "v1", "secrets", "secret", "Secret", true, false, {}));
  AddLocked(BuiltIn("", "v1", "configmaps", "configmap", "ConfigMap", true, false, {"cm"}));
  AddLocked(BuiltIn("", "v1", "events", "event", "Event", true, false, {"ev"}));
  AddLocked(BuiltIn("", "v1", "nodes", "node", "Node", false, true, {"no"}));
  AddLocked(BuiltIn("", "v1", "serviceaccounts", "serviceaccount", "ServiceAccount", true, false,
                    {"sa"}));
  AddLocked(BuiltIn("", "v1", "endpoints", "endpoints", "Endpoints", true, false, {"ep"}));
  AddLocked(
      BuiltIn("apps", "v1", "deployments", "deployment", "Deployment", true, true, {"deploy"}));
  AddLocked(BuiltIn("apps", "v1", "daemonsets", "daemonset", "DaemonSet", true, true, {"ds"}));
  AddLocked(BuiltIn("networking.k8s.io", "v1", "networkpolicies", "networkpolicy", "NetworkPolicy",
                    true, false, {"netpol"}));
  AddLocked(BuiltIn("coordination.k8s.io", "v1", "leases", "lease", "Lease", true, false, {}));
  AddLocked(BuiltIn("rbac.authorization.k8s.io", "v1", "roles", "role", "Role", true, false, {}));
  AddLocked(BuiltIn("rbac.authorization.k8s.io", "v1", "rolebindings", "rolebinding", "RoleBinding",
                    true, false, {}));
  AddLocked(BuiltIn("rbac.authorization.k8s.io", "v1", "clusterroles", "clusterrole", "ClusterRole",
                    false, false, {}));
  AddLocked(BuiltIn("rbac.authorization.k8s.io", "v1", "clusterrolebindings", "clusterrolebinding",
                    "ClusterRoleBinding", false, false, {}));
  AddLocked(BuiltIn("policy", "v1", "poddisruptionbudgets", "poddisruptionbudget",
                    "PodDisruptionBudget", true, true, {"pdb"}));
  AddLocked(BuiltIn("apiextensions.k8s.io", "v1", "customresourcedefinitions",
                    "customresourcedefinition", "CustomResourceDefinition", false, true,
                    {"crd", "crds"}));
}

void ResourceRegistry::AddLocked(ResourceType type) {
  types_[GroupVersion(type.group, type.version)][type.plural] = std::move(type);
}

std::optional<ResourceType> ResourceRegistry::Find(const std::string& group,
                                                   const std::string& version,
                                                   const std::string& plural) const {
  absl::MutexLock lock(&mu_);
  auto gv = types_.find(GroupVersion(group, version));
  if (gv == types_.end()) return std::nullopt;
  auto it = gv->second.find(plural);
  if (it == gv->second.end()) return std::nullopt;
  return it->second;
}

std::vector<ResourceType> ResourceRegistry::All() const {
  absl::MutexLock lock(&mu_);
  std::vector<ResourceType> out;
  for (const auto& [gv, types] : types_) {
    for (const auto& [plural, type] : types) out.push_back(type);
  }
  return out;
}

std::vector<ResourceType> ResourceRegistry::ByStoreKey(const std::string& store_key) const {
  absl::MutexLock lock(&mu_);
  std::vector<ResourceType> out;
  for (const auto& [gv, types] : types_) {
    for (const auto& [plural, type] : types) {
      if (type.StoreKey() == store_key) out.push_back(type);
    }
  }
  return out;
}

std::vector<FieldError> ValidateCrd(const Json& crd) {
  std::vector<FieldError> errors;
  auto required = [&](const std::string& field) {
    errors.push_back({"FieldValueRequired", field, "Required value"});
  };
  const Json* spec = FieldOf(crd, "spec");
  if (spec == nullptr || !spec->is_object()) {
    required("spec");
    return errors;
  }
  const std::string group = kube::StringAt(*spec, "group");
  if (group.empty()) required("spec.group");
  const Json* names = FieldOf(*spec, "names");
  const std::string plural = names != nullptr ? kube::StringAt(*names, "plural") : "";
  if (plural.empty()) required("spec.names.plural");
  if (names == nullptr || kube::StringAt(*names, "kind").empty()) required("spec.names.kind");
  const std::string scope = kube::StringAt(*spec, "scope");
  if (scope != "Namespaced" && scope != "Cluster") {
    errors.push_back({"FieldValueNotSupported", "spec.scope",
                      absl::StrCat("Unsupported value: \"", scope,
                                   "\": supported values: \"Cluster\", \"Namespaced\"")});
  }
  const std::string name = kube::MetaString(crd, "name");
  if (!plural.empty() && !group.empty() && name != plural + "." + group) {
    errors.push_back({"FieldValueInvalid", "metadata.name",
                      absl::StrCat("Invalid value: \"", name,
                                   "\": must be spec.names.plural+\".\"+spec.group")});
  }
  const Json* versions = FieldOf(*spec, "versions");
  if (versions == nullptr || !versions->is_array() || versions->size() == 0) {
    required("spec.versions");
    return errors;
  }
  int storage = 0;
  for (size_t i = 0; i < versions->size(); ++i) {
    const Json& v = versions->at(i);
    if (kube::StringAt(v, "name").empty()) required(absl::StrCat("spec.versions[", i, "].name"));
    const Json* s = FieldOf(v, "storage");
    if (s != nullptr && s->is_boolean() && s->as_bool()) ++storage;
  }
  if (storage != 1) {
    errors.push_back({"FieldValueInvalid", "spec.versions",
                      "Invalid value: must have exactly one version marked as storage version"});
  }
  return errors;
}

absl::Status ResourceRegistry::RegisterCrd(const Json& crd) {
  if (std::vector<FieldError> errors = ValidateCrd(crd); !errors.empty()) {
    return absl::InvalidArgumentError(errors.front().field + ": " + errors.front().message);
  }
  const Json& spec = crd.at("spec");
  const Json& names = spec.at("names");
  const std::string crd_name = kube::MetaString(crd, "name");
  std::vector<std::string> short_names;
  if (const Json* sn = FieldOf(names, "shortNames"); sn != nullptr && sn->is_array()) {
    for (const Json& s : sn->as_array()) {
      if (s.is_string()) short_names.push_back(s.as_string());
    }
  }
  absl::MutexLock lock(&mu_);
  for (auto& [gv, types] : types_) {
    std::erase_if(types, [&](const auto& entry) { return entry.second.crd_name == crd_name; });
  }
  for (const Json& v : spec.at("versions").as_array()) {
    const Json* served = FieldOf(v, "served");
    if (served != nullptr && served->is_boolean() && !served->as_bool()) continue;
    ResourceType t;
    t.group = kube::StringAt(spec, "group");
    t.version = kube::StringAt(v, "name");
    t.plural = kube::StringAt(names, "plural");
    t.singular = kube::StringAt(names, "singular");
    if (t.singular.empty()) t.singular = kube::StringAt(names, "kind");
    t.kind = kube::StringAt(names, "kind");
    t.namespaced = kube::StringAt(spec, "scope") == "Namespaced";
    t.short_names = short_names;
    t.crd_name = crd_name;
    const Json* subresources = FieldOf(v, "subresources");
    t.status_subresource = subresources != nullptr && FieldOf(*subresources, "status") != nullptr;
    const Json* schema = FieldOf(v, "schema");
    const Json* openapi = schema != nullptr ? FieldOf(*schema, "openAPIV3Schema") : nullptr;
    t.schema = openapi != nullptr ? *openapi : Json::null();
    t.columns = PrinterColumnsFromCrdVersion(v);
    AddLocked(std::move(t));
  }
  return absl::OkStatus();
}

void ResourceRegistry::UnregisterCrd(const std::string& crd_name) {
  absl::MutexLock lock(&mu_);
  for (auto& [gv, types] : types_) {
    std::erase_if(types, [&](const auto& entry) { return entry.second.crd_name == crd_name; });
  }
}

Json ResourceRegistry::CoreApiVersions(const std::string& server_address) const {
  Json out = Json::object();
  out["kind"] = Json::string("APIVersions");
  out["versions"] = StringArray({"v1"});
  Json cidr = Json::object();
  cidr["clientCIDR"] = Json::string("0.0.0.0/0");
  cidr["serverAddress"] = Json::string(server_address);
  out["serverAddressByClientCIDRs"] = Json::array({cidr});
  return out;
}

Json ResourceRegistry::GroupList() const {
  absl::MutexLock lock(&mu_);
  std::map<std::string, std::vector<std::string>> versions_by_group;
  for (const auto& [gv, types] : types_) {
    if (types.empty()) continue;
    const ResourceType& any = types.begin()->second;
    if (any.group.empty()) continue;
    versions_by_group[any.group].push_back(any.version);
  }
  Json groups = Json::array();
  size_t i = 0;
  for (const auto& [group, versions] : versions_by_group) {
    Json g = Json::object();
    g["name"] = Json::string(group);
    Json vs = Json::array();
    for (size_t j = 0; j < versions.size(); ++j) {
      Json v = Json::object();
      v["groupVersion"] = Json::string(group + "/" + versions[j]);
      v["version"] = Json::string(versions[j]);
      vs[j] = v;
    }
    g["versions"] = vs;
    g["preferredVersion"] = vs[vs.size() - 1];
    groups[i++] = g;
  }
  Json out = Json::object();
  out["kind"] = Json::string("APIGroupList");
  out["apiVersion"] = Json::string("v1");
  out["groups"] = groups;
  return out;
}

std::optional<Json> ResourceRegistry::ResourceList(const std::string& group,
                                                   const std::string& version) const {
  absl::MutexLock lock(&mu_);
  auto gv = types_.find(GroupVersion(group, version));
  if (gv == types_.end() || gv->second.empty()) return std::nullopt;
  Json resources = Json::array();
  size_t i = 0;
  const Json verbs = StringArray({"create", "delete", "get", "list", "patch", "update", "watch"});
  for (const auto& [plural, t] : gv->second) {
    Json r = Json::object();
    r["name"] = Json::string(plural);
    r["singularName"] = Json::string(t.singular);
    r["namespaced"] = Json::boolean(t.namespaced);
    r["kind"] = Json::string(t.kind);
    r["verbs"] = verbs;
    if (!t.short_names.empty()) r["shortNames"] = StringArray(t.short_names);
    resources[i++] = r;
    if (t.status_subresource) {
      Json s = Json::object();
      s["name"] = Json::string(plural + "/status");
      s["singularName"] = Json::string("");
      s["namespaced"] = Json::boolean(t.namespaced);
      s["kind"] = Json::string(t.kind);
      s["verbs"] = StringArray({"get", "patch", "update"});
      resources[i++] = s;
    }
    if (plural == "pods") {
      Json log = Json::object();
      log["name"] = Json::string("pods/log");
      log["singularName"] = Json::string("");
      log["namespaced"] = Json::boolean(true);
      log["kind"] = Json::string("Pod");
      log["verbs"] = StringArray({"get"});
      resources[i++] = log;
    }
  }
  Json out = Json::object();
  out["kind"] = Json::string("APIResourceList");
  out["apiVersion"] = Json::string("v1");
  out["groupVersion"] = Json::string(GroupVersion(group, version));
  out["resources"] = resources;
  return out;
}

}  // namespace phalanx::localcluster
