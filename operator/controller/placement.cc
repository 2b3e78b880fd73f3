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

// One required pod (anti-)affinity term: pods matching `expressions`, over `topology_key`.
Json RequiredPodTerm(const std::string& topology_key, std::vector<Json> expressions) {
  Json term = Json::object();
  term["labelSelector"] = Json::object();
  term["labelSelector"]["matchExpressions"] = Json::array(std::move(expressions));
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

Json TaskPlacementAffinity(const std::string& job, const PlacementSpec& placement,
                           const Json& user) {
  Json affinity = user.is_object() ? user : Json::object();
  const std::string& key = placement.topology_key;
  AppendRequiredTerm(affinity, "podAffinity",
                     RequiredPodTerm(key, {LabelExpression(kJobLabel, "In", {job}),
                                           LabelExpression(kRoleLabel, "In", {"task"})}));
  if (placement.exclusive) {
    // Another job's task pods: a job label that is not ours (coordinators are not counted: one
    // is small and may sit anywhere).
    AppendRequiredTerm(affinity, "podAntiAffinity",
                       RequiredPodTerm(key, {LabelExpression(kJobLabel, "Exists", {}),
                                             LabelExpression(kJobLabel, "NotIn", {job}),
                                             LabelExpression(kRoleLabel, "In", {"task"})}));
  }
  return affinity;
}

}  // namespace phalanx::op
