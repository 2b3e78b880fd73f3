// NodeTaintSource: notices from the node's own Node object in the Kubernetes API — a taint that
// announces its departure (kube::IsPreemptionTaint: GKE's impending-node-termination, the AWS node
// termination handler's spot-itn / scheduled-maintenance, the cluster autoscaler's scale-down,
// a drain's unschedulable taint, phalanx.dev/preempting) or a cordon (spec.unschedulable). It is
// the cloud-agnostic source: whatever handler runs on the cluster, it marks the Node.
// Each Poll is one `client.Get(nodes, "", node_name)`, bounded by the client's own request
// timeout. Taints carry no "goes away at", so deadlines are absl::InfiniteFuture().
// Used by the node agent binary (needs RBAC `get` on nodes). Thread-safety: NoticeSource's (Poll
// from one thread at a time); the client must outlive the source.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/kube/client.h"
#include "node_agent/preemption/notice_source.h"

namespace phalanx::agent {

class NodeTaintSource final : public NoticeSource {
 public:
  // A phalanx.dev/preempting taint whose value is one of `own_markers` is this agent's own
  // marker (the value names the source whose notice it marks): it is not news, and reporting it
  // would keep the agent from ever lifting a maintenance taint it placed.
  NodeTaintSource(kube::Client& client, std::string node_name,
                  std::vector<std::string> own_markers = {})
      : client_(client), node_name_(std::move(node_name)), own_markers_(std::move(own_markers)) {}

  std::string name() const override { return "node-taint"; }

  // A "preemption" notice for a termination / preemption / scale-down taint (detail
  // "taint <key>"); otherwise a "maintenance" notice for a drain or cordon (the unschedulable
  // taint, the scheduled-maintenance taint, or spec.unschedulable); otherwise nullopt.
  // Errors: the client's (NotFound when the Node object does not exist, Unavailable, ...).
  absl::StatusOr<std::optional<NodeNotice>> Poll(absl::Time now) override;

 private:
  kube::Client& client_;
  const std::string node_name_;
  const std::vector<std::string> own_markers_;
};

}  // namespace phalanx::agent
