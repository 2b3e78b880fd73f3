#include "tests/localcluster/strategic_merge.h"

#include <string>

#include "absl/strings/match.h"
#include "common/kube/json.h"

namespace phalanx::localcluster {
namespace {

using kube::Json;

bool IsDirective(const std::string& key) {
  return key == "$retainKeys" || absl::StartsWith(key, "$setElementOrder/") ||
         absl::StartsWith(key, "$deleteFromPrimitiveList/");
}

// The merge key every object element of both lists carries, or "" (then the list is replaced).
std::string MergeKey(const Json& a, const Json& b) {
  for (const char* key : {"name", "mountPath", "containerPort"}) {
    bool all = true;
    for (const Json* list : {&a, &b}) {
      for (const Json& e : list->as_array()) {
        if (!e.is_object() || !e.has_field(key)) all = false;
      }
    }
    if (all) return key;
  }
  return "";
}

std::string PatchDirective(const Json& element) {
  if (element.is_object() && element.has_field("$patch") && element.at("$patch").is_string()) {
    return element.at("$patch").as_string();
  }
  return "";
}

Json WithoutDirectives(const Json& object) {
  if (!object.is_object()) return object;
  Json out = Json::object();
  for (const auto& [k, v] : object.as_object()) {
    if (k != "$patch" && !IsDirective(k)) out[k] = WithoutDirectives(v);
  }
  return out;
}

Json MergeLists(const Json& target, const Json& patch, const std::string& key) {
  Json out = target;
  for (const Json& element : patch.as_array()) {
    const Json& id = element.at(key);
    size_t found = out.size();
    for (size_t i = 0; i < out.size(); ++i) {
      if (out.at(i).at(key) == id) found = i;
    }
    const std::string directive = PatchDirective(element);
    if (directive == "delete") {
      if (found < out.size())
        out.as_array().erase(out.as_array().begin() + static_cast<long>(found));
      continue;
    }
    if (found == out.size()) {
      out[out.size()] = WithoutDirectives(element);
    } else {
      out[found] = StrategicMerge(out.at(found), element);
    }
  }
  return out;
}

}  // namespace

Json StrategicMerge(Json target, const Json& patch) {
  if (!patch.is_object()) return patch;
  if (PatchDirective(patch) == "replace") return WithoutDirectives(patch);
  if (!target.is_object()) target = Json::object();
  for (const auto& [key, value] : patch.as_object()) {
    if (key == "$patch" || IsDirective(key)) continue;
    if (value.is_null()) {
      if (target.has_field(key)) target.erase(key);
      continue;
    }
    if (value.is_array() && target.has_field(key) && target.at(key).is_array()) {
      const std::string merge_key = MergeKey(target.at(key), value);
      target[key] = merge_key.empty() ? value : MergeLists(target.at(key), value, merge_key);
      continue;
    }
    Json current = target.has_field(key) ? target.at(key) : Json::null();
    target[key] = value.is_object() ? StrategicMerge(std::move(current), value) : value;
  }
  return target;
}

}  // namespace phalanx::localcluster
