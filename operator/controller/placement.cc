#include "operator/controller/placement.h"

#include <string>
#include <utility>
#include <vector>

#include "operator/controller/desired_state.h"

namespace phalanx::op {
namespace {

Json LabelExpression(const std::string& key, const std::string& op,
                     std::vector<std::string> values) {
  Json e = Json::object();
  e["key"] = Json::string(key);
  e["operator"] = Json::string(op);
  if (!values.empty()) {
    Json list = Json::array();
    for (const std::string& v : values) list[list.size()] = Json::string(v);
    e["values"] = list;
  }
  return e;
}

// One required pod (anti-)affinity term: pods matching `expressions`, over `topology_key`, in
// the pod's own namespace, or in the namespaces `namespace_selector` picks when it is set.
Json RequiredPodTerm(const std::string& topology_key, std::vector<Json> expressions,
                     Json namespace_selector = Json::null()) {
  Json term = Json::object();
  term["labelSelector"] = Json::object();
  term["labelSelector"]["matchExpressions"] = Json::array(std::move(expressions));
  if (!namespace_selector.is_null()) term["namespaceSelector"] = std::move(namespace_selector);
  term["topologyKey"] = Json::string(topology_key);
  return term;
}

// Appends `term` to affinity[kind].requiredDuringSchedulingIgnoredDuringExecution.
void AppendRequiredTerm(Json& affinity, const char* kind, Json term) {
  Json& rules = affinity[kind];
  if (!rules.is_object()) rules = Json::object();
  Json& required = rules["requiredDuringSchedulingIgnoredDuringExecution"];
  if (!required.is_array()) required = Json::array();
  required[required.size()] = std::move(term);
}

}  // namespace

Json TaskPlacementAffinity(const std::string& ns, const std::string& job,
                           const PlacementSpec& placement, const Json& user) {
  Json affinity = user.is_object() ? user : Json::object();
  const std::string& key = placement.topology_key;
  AppendRequiredTerm(affinity, "podAffinity",
                     RequiredPodTerm(key, {LabelExpression(kJobLabel, "In", {job}),
                                           LabelExpression(kRoleLabel, "In", {"task"})}));
  if (placement.exclusive) {
    // Every other job's task pods (coordinators are small and may sit anywhere): in this
    // namespace those whose job label is not ours, in every other namespace all of them (a job
    // of the same name there is another job).
    AppendRequiredTerm(affinity, "podAntiAffinity",
                       RequiredPodTerm(key, {LabelExpression(kJobLabel, "Exists", {}),
                                             LabelExpression(kJobLabel, "NotIn", {job}),
                                             LabelExpression(kRoleLabel, "In", {"task"})}));
    Json other_namespaces = Json::object();
    other_namespaces["matchExpressions"] =
        Json::array({LabelExpression("kubernetes.io/metadata.name", "NotIn", {ns})});
    AppendRequiredTerm(affinity, "podAntiAffinity",
                       RequiredPodTerm(key,
                                       {LabelExpression(kJobLabel, "Exists", {}),
                                        LabelExpression(kRoleLabel, "In", {"task"})},
                                       std::move(other_namespaces)));
  }
  return affinity;
}

}  // namespace phalanx::op
