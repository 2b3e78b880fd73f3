#include "operator/controller/observe.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/kube/node_preemption.h"
#include "common/kube/object_meta.h"
#include "operator/controller/desired_state.h"

namespace phalanx::op {
namespace {

template <typename T>
T LabelNumber(const std::map<std::string, std::string>& labels, const char* key, T none) {
  auto it = labels.find(key);
  T v = none;
  if (it == labels.end() || !absl::SimpleAtoi(it->second, &v)) return none;
  return v;
}

bool ConditionTrue(const Json& pod, const std::string& type) {
  for (const Json& c :
       kube::ArrayOrEmpty(kube::FieldOrNull(pod, "status"), "conditions").as_array()) {
    if (kube::StringAt(c, "type") == type) return kube::StringAt(c, "status") == "True";
  }
  return false;
}

}  // namespace

PodPhase ParsePodPhase(const std::string& phase) {
  if (phase == "Pending") return PodPhase::kPending;
  if (phase == "Running") return PodPhase::kRunning;
  if (phase == "Succeeded") return PodPhase::kSucceeded;
  if (phase == "Failed") return PodPhase::kFailed;
  return PodPhase::kUnknown;
}

void DropManagedFields(Json& object) {
  if (!object.is_object() || !object.has_field("metadata")) return;
  Json& metadata = object.at("metadata");
  if (metadata.is_object() && metadata.has_field("managedFields")) {
    metadata.as_object().erase("managedFields");
  }
}

void TrimCachedPod(Json& pod) {
  DropManagedFields(pod);
  if (!pod.is_object() || !pod.has_field("spec") || !pod.at("spec").is_object()) return;
  const Json& spec = pod.at("spec");
  Json kept = Json::object();
  if (spec.has_field("nodeName")) kept["nodeName"] = spec.at("nodeName");
  Json containers = Json::array();
  size_t n = 0;
  // A coordinator's arguments say whether it serves TLS (PodView::serves_tls); a task's may be
  // long and are never read.
  const std::map<std::string, std::string> labels = kube::LabelsOf(pod);
  const auto role = labels.find(kRoleLabel);
  const bool coordinator = role != labels.end() && role->second == "coordinator";
  for (const Json& container : kube::ArrayOrEmpty(spec, "containers").as_array()) {
    Json slim = Json::object();
    for (const char* field : {"name", "ports", "args"}) {
      if (std::string_view(field) == "args" && !coordinator) continue;
      if (container.is_object() && container.has_field(field)) slim[field] = container.at(field);
    }
    containers[n++] = std::move(slim);
  }
  if (n > 0) kept["containers"] = std::move(containers);
  pod["spec"] = std::move(kept);
}

PodView ViewOfPod(const Json& pod) {
  PodView v;
  v.name = kube::MetaString(pod, "name");
  v.uid = kube::MetaString(pod, "uid");
  v.created = kube::ParseKubeTime(kube::MetaString(pod, "creationTimestamp"))
                  .value_or(absl::InfiniteFuture());
  const std::map<std::string, std::string> labels = kube::LabelsOf(pod);
  v.index = LabelNumber(labels, kTaskLabel, -1);
  v.incarnation = LabelNumber(labels, kIncarnationLabel, base::kNoIncarnation);
  v.from_spare = labels.contains(kSpareLabel);
  v.spare_slot = LabelNumber(labels, kSpareLabel, -1);
  v.spare_generation = LabelNumber(labels, kSpareGenerationLabel, -1);
  v.phase = ParsePodPhase(kube::StringAt(pod, "status.phase"));
  v.node = kube::StringAt(pod, "spec.nodeName");
  v.ip = kube::StringAt(pod, "status.podIP");
  const Json& containers = kube::ArrayOrEmpty(kube::FieldOrNull(pod, "spec"), "containers");
  if (containers.size() > 0) {
    for (const Json& port : kube::ArrayOrEmpty(containers.at(0), "ports").as_array()) {
      const Json& number = kube::FieldOrNull(port, "containerPort");
      if (kube::StringAt(port, "name") == "grpc" && number.is_integer()) {
        v.grpc_port = number.as_integer();
      }
    }
    if (const auto role = labels.find(kRoleLabel);
        role != labels.end() && role->second == "coordinator") {
      for (const Json& arg : kube::ArrayOrEmpty(containers.at(0), "args").as_array()) {
        if (arg.is_string() && arg.as_string().starts_with("--tls_cert_file=")) v.serves_tls = true;
      }
    }
  }
  v.being_deleted = kube::IsBeingDeleted(pod);
  v.ready = ConditionTrue(pod, "Ready");
  v.disruption_target = ConditionTrue(pod, "DisruptionTarget");
  for (const Json& c :
       kube::ArrayOrEmpty(kube::FieldOrNull(pod, "status"), "conditions").as_array()) {
    if (v.disruption_target && kube::StringAt(c, "type") == "DisruptionTarget") {
      v.disruption = kube::StringAt(c, "reason");
      if (const std::string m = kube::StringAt(c, "message"); !m.empty()) {
        absl::StrAppend(&v.disruption, v.disruption.empty() ? "" : ": ", m);
      }
    }
    if (kube::StringAt(c, "type") == "PodScheduled" && kube::StringAt(c, "status") == "False" &&
        kube::StringAt(c, "reason") == "Unschedulable") {
      v.unschedulable = true;
      v.unschedulable_message = kube::StringAt(c, "message");
    }
  }
  const Json& statuses = kube::ArrayOrEmpty(kube::FieldOrNull(pod, "status"), "containerStatuses");
  if (statuses.size() > 0) {
    const Json& terminated =
        kube::FieldOrNull(kube::FieldOrNull(statuses.at(0), "state"), "terminated");
    const Json& code = kube::FieldOrNull(terminated, "exitCode");
    if (code.is_integer()) v.exit_code = code.as_integer();
    v.reason = kube::StringAt(terminated, "reason");
    v.message = kube::StringAt(terminated, "message");  // the termination message, if any
    if (std::string finished = kube::StringAt(terminated, "finishedAt"); !finished.empty()) {
      v.finished_at = kube::ParseKubeTime(finished);
    }
    const Json& waiting = kube::FieldOrNull(kube::FieldOrNull(statuses.at(0), "state"), "waiting");
    v.waiting_reason = kube::StringAt(waiting, "reason");
    v.waiting_message = kube::StringAt(waiting, "message");
  }
  if (v.reason.empty()) v.reason = kube::StringAt(pod, "status.reason");  // e.g. Evicted
  return v;
}

absl::Time NodePreemptionDeadline(const Json& node) {
  const Json& value =
      kube::FieldOrNull(kube::FieldOrNull(kube::FieldOrNull(node, "metadata"), "annotations"),
                        kube::kPreemptionDeadlineAnnotation);
  if (!value.is_string()) return absl::InfiniteFuture();
  return kube::ParseKubeTime(value.as_string()).value_or(absl::InfiniteFuture());
}

}  // namespace phalanx::op
