// NodeMarker: how the agent tells the cluster about its node. It adds a NoSchedule taint to the
// agent's own Node (new tasks avoid it, and phalanx-operator, which watches nodes, opens a
// preemption round on the coordinator of every job with a task there and moves those tasks) and
// keeps Phalanx conditions in the Node's status (GPU health, node checks, preemption notice),
// leaving every other taint and condition as it is.
//
// Taints: phalanx.dev/preempting=<source>:NoSchedule for a preemption or maintenance notice,
// phalanx.dev/gpu-failed=<gpu>:NoSchedule for a fatal GPU error. Both are preemption taints to
// the operator (common/kube/node_preemption.h).
//
// Read-modify-write with the Node's resourceVersion; a 409 (the kubelet wrote in between) is
// retried a few times. Errors: those of the API (Unavailable on 429/5xx, NotFound for a node
// that does not exist, PermissionDenied without RBAC). Thread-compatible (the agent's tick).
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/kube/client.h"

namespace phalanx::agent {

inline constexpr char kPreemptingTaint[] = "phalanx.dev/preempting";
inline constexpr char kGpuFailedTaint[] = "phalanx.dev/gpu-failed";
// Written with the agent's phalanx.dev/preempting taint: the kind of notice it marks
// ("preemption" or "maintenance"), so that an agent that restarted during a maintenance window
// knows the taint it finds is one to lift once the window is over (a preemption's stays).
inline constexpr char kNoticeKindAnnotation[] = "phalanx.dev/preemption-notice-kind";

// A taint found on the node, with the node's notice-kind annotation.
struct FoundTaint {
  std::string value;
  std::string notice_kind;  // kNoticeKindAnnotation's value; "" when the node has none
};

struct NodeCondition {
  std::string type;    // e.g. PhalanxGpuHealthy
  bool status = true;  // True / False
  std::string reason;  // CamelCase
  std::string message;
};

class NodeMarker {
 public:
  NodeMarker(kube::Client& client, std::string node_name);

  // Adds taint `key`=`value`:NoSchedule unless a taint with that key is there already, and sets
  // `annotations` on the Node in the same write (so the operator never sees the taint without
  // them; kube/node_preemption.h). No write when the taint and every annotation are there already.
  absl::Status Taint(const std::string& key, const std::string& value,
                     const std::map<std::string, std::string>& annotations = {});
  // Removes the taint with `key`, if any.
  absl::Status Untaint(const std::string& key);
  // The taint with `key`, if the node has one (one GET).
  absl::StatusOr<std::optional<FoundTaint>> FindTaint(const std::string& key);
  // Sets these conditions (by type) in status.conditions; lastTransitionTime moves only when a
  // condition's status flips, lastHeartbeatTime on every write. No write when nothing changed.
  absl::Status SetConditions(const std::vector<NodeCondition>& conditions, absl::Time now);

  const std::string& node_name() const { return node_name_; }

 private:
  kube::Client& client_;
  const std::string node_name_;
};

}  // namespace phalanx::agent
