// Which node changes matter to TrainingJobs, so a node's routine status updates (kubelet
// heartbeats every few seconds on every node) do not wake every job on it: only a flip of
// NodeIsBeingPreempted does (a termination/maintenance taint or a cordon comes or goes).
// Jobs on a node are found through a pods-by-node informer index, not a scan of every pod.
// Used by phalanx-operator's wiring. Thread-safe.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "common/kube/informer.h"
#include "operator/controller/observe.h"

namespace phalanx::op {

inline constexpr char kPodsByNodeIndex[] = "node";

// The index function for kPodsByNodeIndex: a pod's spec.nodeName (none while unscheduled).
std::vector<std::string> PodNodeName(const Json& pod);

// Keys of the jobs with a task pod on `node`; `pods` must carry kPodsByNodeIndex.
std::vector<std::string> JobKeysOnNode(kube::Informer& pods, const Json& node);

class NodePreemptionFilter {
 public:
  // True when `node`'s preemption state differs from the last one seen for it (a node first
  // seen counts as changed only if it is already being preempted).
  bool Changed(const Json& node);

 private:
  absl::Mutex mu_;
  std::map<std::string, bool> preempting_ ABSL_GUARDED_BY(mu_);
};

}  // namespace phalanx::op
