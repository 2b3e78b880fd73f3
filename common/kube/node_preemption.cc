#include "common/kube/node_preemption.h"

#include "common/kube/object_meta.h"

namespace phalanx::kube {

bool IsPreemptionTaint(const std::string& key) {
  return key == "cloud.google.com/impending-node-termination" ||
         key == "aws-node-termination-handler/spot-itn" ||
         key == "aws-node-termination-handler/scheduled-maintenance" ||
         key == "node.kubernetes.io/unschedulable" || key == "ToBeDeletedByClusterAutoscaler" ||
         key == "phalanx.dev/preempting" || key == "phalanx.dev/gpu-failed";
}

std::optional<std::string> PreemptionTaintOf(const Json& node) {
  for (const Json& taint : ArrayOrEmpty(FieldOrNull(node, "spec"), "taints").as_array()) {
    std::string key = StringAt(taint, "key");
    if (IsPreemptionTaint(key)) return key;
  }
  return std::nullopt;
}

bool NodeIsBeingPreempted(const Json& node) {
  const Json& unschedulable = FieldOrNull(FieldOrNull(node, "spec"), "unschedulable");
  if (unschedulable.is_boolean() && unschedulable.as_bool()) return true;
  return PreemptionTaintOf(node).has_value();
}

}  // namespace phalanx::kube
