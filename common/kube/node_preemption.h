// Which Node objects say "this node is about to go away": the taints cloud providers, node
// termination handlers, the cluster autoscaler and Phalanx itself put on a node before it is
// preempted, drained or deleted, and a cordon (spec.unschedulable). Shared by the operator
// (which moves tasks off such nodes) and the node agent's NodeTaintSource (which turns them into
// preemption notices), so both agree on one list. Pure; never throws; thread-safe.
#pragma once

#include <cpprest/json.h>

#include <optional>
#include <string>

#include "common/kube/json.h"

namespace phalanx::kube {

// The Node annotation through which the node agent tells the operator when its node goes away.
// The agent's notice sources know a deadline (GCE: 30 s after instance/preempted turns TRUE; AWS:
// the instance-action time); the agent writes it in the same update as its phalanx.dev/preempting
// taint, as FormatKubeTime writes times (RFC 3339, UTC, whole seconds rounded down):
//   metadata.annotations["phalanx.dev/preemption-deadline"] = "2030-01-02T03:04:05Z"
// and the operator gives the job's coordinated checkpoint the earlier of that deadline and
// "first seen + spec.preemption.checkpointGraceSeconds". No annotation (or garbage in it) means
// the deadline is unknown. Written by node_agent/, read by operator/.
inline constexpr char kPreemptionDeadlineAnnotation[] = "phalanx.dev/preemption-deadline";

// True for the taint keys that announce a node's departure:
//   cloud.google.com/impending-node-termination            (GKE spot/preemptible VMs)
//   aws-node-termination-handler/spot-itn                  (AWS spot interruption notice)
//   aws-node-termination-handler/scheduled-maintenance     (AWS scheduled events)
//   node.kubernetes.io/unschedulable                       (cordon / drain)
//   ToBeDeletedByClusterAutoscaler                         (scale-down)
//   phalanx.dev/preempting                                 (Phalanx's own marker, and tests')
//   phalanx.dev/gpu-failed                                 (the node agent: a GPU failed; its
//                                                           tasks checkpoint and move)
bool IsPreemptionTaint(const std::string& key);

// The key of the first taint in node.spec.taints for which IsPreemptionTaint holds; nullopt when
// there is none. A cordon without the matching taint is not a taint: see NodeIsBeingPreempted.
std::optional<std::string> PreemptionTaintOf(const Json& node);

// True when the node carries a preemption taint or is cordoned (spec.unschedulable: true).
bool NodeIsBeingPreempted(const Json& node);

}  // namespace phalanx::kube
