#include "tests/localcluster/openapi_docs.h"

#include <set>

#include "absl/strings/str_cat.h"
#include "common/kube/json.h"

namespace phalanx::localcluster {
namespace {

using kube::Json;

std::string GvPath(const ResourceType& t) {
  return t.group.empty() ? "api/" + t.version : "apis/" + t.group + "/" + t.version;
}

}  // namespace

Json OpenApiV3Root(const ResourceRegistry& registry) {
  Json paths = Json::object();
  std::set<std::string> seen;
  for (const ResourceType& t : registry.All()) {
    const std::string gv = GvPath(t);
    if (!seen.insert(gv).second) continue;
    Json entry = Json::object();
    // The hash only has to change when the document does; registration order is enough here.
    entry["serverRelativeURL"] = Json::string(absl::StrCat("/openapi/v3/", gv, "?hash=phalanx"));
    paths[gv] = entry;
  }
  Json root = Json::object();
  root["paths"] = paths;
  return root;
}

std::optional<Json> OpenApiV3GroupVersion(const ResourceRegistry& registry,
                                          const std::string& gv_path) {
  Json paths = Json::object();
  bool any = false;
  for (const ResourceType& t : registry.All()) {
    if (GvPath(t) != gv_path) continue;
    any = true;
    Json gvk = Json::object();
    gvk["group"] = Json::string(t.group);
    gvk["version"] = Json::string(t.version);
    gvk["kind"] = Json::string(t.kind);
    Json param = Json::object();
    param["name"] = Json::string("fieldValidation");
    param["in"] = Json::string("query");
    param["schema"] = Json::object();
    param["schema"]["type"] = Json::string("string");
    Json patch = Json::object();
    patch["x-kubernetes-group-version-kind"] = gvk;
    patch["parameters"] = Json::array({param});
    patch["responses"] = Json::object();
    Json item = Json::object();
    item["patch"] = patch;
    const std::string ns = t.namespaced ? "namespaces/{namespace}/" : "";
    paths[absl::StrCat("/", gv_path, "/", ns, t.plural, "/{name}")] = item;
  }
  if (!any) return std::nullopt;
  Json doc = Json::object();
  doc["openapi"] = Json::string("3.0.0");
  doc["info"] = Json::object();
  doc["info"]["title"] = Json::string("phalanx-localcluster");
  doc["info"]["version"] = Json::string("v1.32.0");
  doc["paths"] = paths;
  doc["components"] = Json::object();
  doc["components"]["schemas"] = Json::object();
  return doc;
}

}  // namespace phalanx::localcluster
