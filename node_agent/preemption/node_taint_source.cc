#include "node_agent/preemption/node_taint_source.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "common/kube/node_preemption.h"
#include "common/kube/object_meta.h"
#include "common/kube/resources.h"

namespace phalanx::agent {
namespace {

using kube::kNodes;

// Taints that announce a drain or maintenance window rather than the node's termination.
bool IsMaintenanceTaint(const std::string& key) {
  return key == "node.kubernetes.io/unschedulable" ||
         key == "aws-node-termination-handler/scheduled-maintenance";
}

}  // namespace

absl::StatusOr<std::optional<NodeNotice>> NodeTaintSource::Poll(absl::Time now) {
  ASSIGN_OR_RETURN(const kube::Json node, client_.Get(kNodes, "", node_name_));
  // A termination taint outranks a drain: report the most urgent thing the node says.
  std::optional<std::string> maintenance_taint;
  for (const kube::Json& taint :
       kube::ArrayOrEmpty(kube::FieldOrNull(node, "spec"), "taints").as_array()) {
    const std::string key = kube::StringAt(taint, "key");
    if (!kube::IsPreemptionTaint(key)) continue;
    if (key == "phalanx.dev/preempting" &&
        std::find(own_markers_.begin(), own_markers_.end(), kube::StringAt(taint, "value")) !=
            own_markers_.end()) {
      continue;
    }
    if (!IsMaintenanceTaint(key)) {
      return NodeNotice{name(), kPreemptionNotice, absl::StrCat("taint ", key),
                        absl::InfiniteFuture()};
    }
    if (!maintenance_taint.has_value()) maintenance_taint = key;
  }
  if (maintenance_taint.has_value()) {
    return NodeNotice{name(), kMaintenanceNotice, absl::StrCat("taint ", *maintenance_taint),
                      absl::InfiniteFuture()};
  }
  const kube::Json& unschedulable =
      kube::FieldOrNull(kube::FieldOrNull(node, "spec"), "unschedulable");
  if (unschedulable.is_boolean() && unschedulable.as_bool()) {  // cordoned, without the taint (yet)
    return NodeNotice{name(), kMaintenanceNotice, "node cordoned (spec.unschedulable)",
                      absl::InfiniteFuture()};
  }
  return std::nullopt;
}

}  // namespace phalanx::agent
