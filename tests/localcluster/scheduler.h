// The local cluster's scheduler: binds pending pods to nodes the way kube-scheduler's default
// plugins would for what Phalanx's pods ask of it (node readiness and unschedulable, taints and
// tolerations, nodeSelector, nvidia.com/gpu requests), packing GPUs onto the fullest node that
// still fits so a multi-node job's leftovers stay usable. ChooseNode is the pure core and is
// table-tested; SchedulePending is one level-triggered pass over a ClusterAccess (the built-in
// store, or a real API server through pods/binding), run by the kubelet's loop
// (tests/localcluster/kubelet.h) before it syncs pods.
// Pure functions and a stateless pass: thread-safe as the store is.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "common/base/clock.h"
#include "tests/localcluster/cluster_access.h"
#include "tests/localcluster/store_types.h"

namespace phalanx::localcluster {

// GPUs a pod asks for: the sum over its containers of resources.limits["nvidia.com/gpu"]
// (requests when no limit), a JSON string ("2") or number. Malformed values count as 0.
int64_t PodGpuRequest(const Json& pod);

// The node for `pod` among `nodes`, or nullopt with a kube-scheduler-like reason in *why_not
// ("0/3 nodes are available: 2 Insufficient nvidia.com/gpu, 1 node(s) had untolerated taint
// {k: v}."; may be null). A node fits when it is Ready, not spec.unschedulable, every
// NoSchedule/NoExecute taint is tolerated, spec.nodeSelector matches its labels, the required
// node affinity matches (nodeSelectorTerms ORed; matchExpressions In/NotIn/Exists/DoesNotExist/
// Gt/Lt on labels, matchFields on metadata.name), and the GPUs of the non-terminated pods bound
// to it (from `pods_on_nodes`) plus this pod's fit status.allocatable. Among fitting nodes the
// one that best suits the pod's preferences wins (preferred node affinity weights, less the
// weights of preferred pod anti-affinity terms a pod in `pods_on_nodes` would break), then the
// one left with the fewest free GPUs, ties by name, so the choice is deterministic. Required pod
// (anti-)affinity is not implemented (Phalanx emits none).
std::optional<std::string> ChooseNode(const Json& pod, const std::vector<Json>& nodes,
                                      const std::vector<Json>& pods_on_nodes, std::string* why_not);

// Sets (or replaces) the PodScheduled condition in pod.status; false when it already said this.
bool SetScheduledCondition(Json& pod, bool scheduled, const std::string& message, absl::Time now);

// One pass: binds every pending pod (no spec.nodeName, not being deleted) through
// ClusterAccess::Bind, in creation order; marks the rest PodScheduled=False reason
// Unschedulable with ChooseNode's message, writing only when that condition changes.
// Conflicts (another writer got there first) are left for the next pass. Returns the number of
// pods bound.
int SchedulePending(ClusterAccess& access, base::Clock& clock);

}  // namespace phalanx::localcluster
