// What the reconciler sees of a job's world, reduced to the facts the policy needs: each task
// pod's index, incarnation, phase, exit code and disruption marks; the coordinator pod; failures
// the coordinator reported. Built from informer-cache objects; pure.
#pragma once

#include <cpprest/json.h>

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/kube/node_preemption.h"

namespace phalanx::op {

using Json = web::json::value;

struct PodView {
  std::string name;
  std::string uid;
  int index = -1;        // task pods: phalanx.dev/task
  int incarnation = -1;  // task pods: phalanx.dev/incarnation
  std::string phase;     // Pending, Running, Succeeded, Failed ("" when unknown)
  std::string node;
  std::string ip;
  bool being_deleted = false;
  bool ready = false;
  bool disruption_target = false;  // condition DisruptionTarget=True (eviction/preemption)
  std::optional<int> exit_code;     // first container's terminated state
  std::string reason;               // its reason (Error, Completed, OOMKilled, ...)
  std::string message;              // more about it, for Events (the coordinator's words)
};

PodView ViewOfPod(const Json& pod);

struct JobObservation {
  std::vector<PodView> task_pods;
  std::optional<PodView> coordinator;
  bool has_secret = false;
  bool has_coordinator_service = false;
  bool has_tasks_service = false;
  // task index → incarnation the coordinator reports failed (crash, hang or error) while its pod
  // may still look Running.
  std::map<int, int> coordinator_failed;
  // task index → the coordinator's reason ("heartbeat timeout", "session broken: ...").
  std::map<int, std::string> coordinator_failure_reasons;
  // Nodes about to go away: termination/maintenance taints, or cordoned.
  std::set<std::string> preempting_nodes;
};

// True when a node carries a termination or maintenance taint or is cordoned (one list, shared
// with the node agent).
using kube::NodeIsBeingPreempted;

}  // namespace phalanx::op
