#include "node_agent/node_marker.h"

#include <functional>

#include "absl/strings/str_cat.h"
#include "common/kube/object_meta.h"
#include "common/kube/resources.h"

namespace phalanx::agent {
namespace {

using kube::kNodes;
constexpr int kConflictRetries = 5;

using kube::Json;

// Gets the node, lets `change` edit it (false: nothing to write), writes it with `write`;
// retried on 409.
absl::Status ReadModifyWrite(kube::Client& client, const std::string& node,
                             const std::function<bool(Json&)>& change,
                             const std::function<absl::Status(const Json&)>& write) {
  absl::Status last;
  for (int attempt = 0; attempt < kConflictRetries; ++attempt) {
    absl::StatusOr<Json> object = client.Get(kNodes, "", node);
    if (!object.ok()) return object.status();
    if (!change(*object)) return absl::OkStatus();
    last = write(*object);
    if (!absl::IsAborted(last) && !absl::IsAlreadyExists(last)) return last;  // 409: again
  }
  return last;
}

// Sets `annotations` in node.metadata.annotations; whether anything changed.
bool Annotate(Json& node, const std::map<std::string, std::string>& annotations) {
  if (annotations.empty()) return false;
  if (!node.has_field("metadata") || !node.at("metadata").is_object()) {
    node["metadata"] = Json::object();
  }
  Json& meta = node["metadata"];
  if (!meta.has_field("annotations") || !meta.at("annotations").is_object()) {
    meta["annotations"] = Json::object();
  }
  Json& existing = meta["annotations"];
  bool changed = false;
  for (const auto& [k, v] : annotations) {
    const Json& now = kube::FieldOrNull(existing, k);  // keys hold dots: no StringAt path
    if (now.is_string() && now.as_string() == v) continue;
    existing[k] = Json::string(v);
    changed = true;
  }
  return changed;
}

}  // namespace

NodeMarker::NodeMarker(kube::Client& client, std::string node_name)
    : client_(client), node_name_(std::move(node_name)) {}

absl::Status NodeMarker::Taint(const std::string& key, const std::string& value,
                               const std::map<std::string, std::string>& annotations) {
  return ReadModifyWrite(
      client_, node_name_,
      [&](Json& node) {
        if (!node.has_field("spec") || !node.at("spec").is_object()) {
          node["spec"] = Json::object();
        }
        bool changed = Annotate(node, annotations);
        Json& spec = node["spec"];
        Json taints = kube::ArrayOrEmpty(spec, "taints");
        for (const Json& t : taints.as_array()) {
          if (kube::StringAt(t, "key") == key) return changed;
        }
        Json taint = Json::object();
        taint["key"] = Json::string(key);
        taint["value"] = Json::string(value);
        taint["effect"] = Json::string("NoSchedule");
        taints[taints.size()] = taint;
        spec["taints"] = taints;
        return true;
      },
      [&](const Json& node) { return client_.Update(kNodes, "", node).status(); });
}

absl::Status NodeMarker::Untaint(const std::string& key) {
  return ReadModifyWrite(
      client_, node_name_,
      [&](Json& node) {
        const Json& taints = kube::ArrayOrEmpty(kube::FieldOrNull(node, "spec"), "taints");
        Json kept = Json::array();
        bool found = false;
        for (const Json& t : taints.as_array()) {
          if (kube::StringAt(t, "key") == key) {
            found = true;
          } else {
            kept[kept.size()] = t;
          }
        }
        if (!found) return false;
        node["spec"]["taints"] = kept;
        return true;
      },
      [&](const Json& node) { return client_.Update(kNodes, "", node).status(); });
}

absl::StatusOr<std::optional<FoundTaint>> NodeMarker::FindTaint(const std::string& key) {
  absl::StatusOr<Json> node = client_.Get(kNodes, "", node_name_);
  if (!node.ok()) return node.status();
  for (const Json& t : kube::ArrayOrEmpty(kube::FieldOrNull(*node, "spec"), "taints").as_array()) {
    if (kube::StringAt(t, "key") != key) continue;
    const Json& kind =
        kube::FieldOrNull(kube::FieldOrNull(kube::FieldOrNull(*node, "metadata"), "annotations"),
                          kNoticeKindAnnotation);  // keys hold dots: no StringAt path
    return FoundTaint{kube::StringAt(t, "value"), kind.is_string() ? kind.as_string() : ""};
  }
  return std::optional<FoundTaint>();
}

absl::Status NodeMarker::SetConditions(const std::vector<NodeCondition>& conditions,
                                       absl::Time now) {
  const std::string stamp = kube::FormatKubeTime(now);
  return ReadModifyWrite(
      client_, node_name_,
      [&](Json& node) {
        if (!node.has_field("status") || !node.at("status").is_object()) {
          node["status"] = Json::object();
        }
        Json list = kube::ArrayOrEmpty(node.at("status"), "conditions");
        bool changed = false;
        for (const NodeCondition& want : conditions) {
          const std::string status = want.status ? "True" : "False";
          bool found = false;
          for (size_t i = 0; i < list.size(); ++i) {
            Json& c = list[i];
            if (kube::StringAt(c, "type") != want.type) continue;
            found = true;
            if (kube::StringAt(c, "status") != status) {
              c["lastTransitionTime"] = Json::string(stamp);
              changed = true;
            }
            if (kube::StringAt(c, "status") != status ||
                kube::StringAt(c, "reason") != want.reason ||
                kube::StringAt(c, "message") != want.message) {
              c["status"] = Json::string(status);
              c["reason"] = Json::string(want.reason);
              c["message"] = Json::string(want.message);
              c["lastHeartbeatTime"] = Json::string(stamp);
              changed = true;
            }
          }
          if (!found) {
            Json c = Json::object();
            c["type"] = Json::string(want.type);
            c["status"] = Json::string(status);
            c["reason"] = Json::string(want.reason);
            c["message"] = Json::string(want.message);
            c["lastHeartbeatTime"] = Json::string(stamp);
            c["lastTransitionTime"] = Json::string(stamp);
            list[list.size()] = c;
            changed = true;
          }
        }
        node["status"]["conditions"] = list;
        return changed;
      },
      [&](const Json& node) { return client_.UpdateStatus(kNodes, "", node).status(); });
}

}  // namespace phalanx::agent
