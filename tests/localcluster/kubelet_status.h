// The objects the local cluster's kubelet (kubelet.h) writes, as a real kubelet shapes them:
// a pod's status from what the kubelet knows of its container, a Node object and its status.
// Recomputing from unchanged facts yields identical JSON (transition and heartbeat times only
// move when something flips or falls due), which is what lets the kubelet write a status only
// when it changed. Pure; thread-safe.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "tests/localcluster/store_types.h"

namespace phalanx::localcluster {

enum class ContainerPhase { kCreating, kRunning, kBackOff, kTerminated };

// What the kubelet knows of a pod and its container.
struct PodReport {
  std::string phase;  // Pending, Running, Succeeded or Failed
  absl::Time start_time;
  bool all_containers = false;  // every container reports the same state (simulated nodes);
                                // otherwise only spec.containers[0], the one that runs
  bool node_ready = true;
  std::string host_ip = "127.0.0.1";  // the node's address
  bool disruption_target = false;     // the node is being preempted
  ContainerPhase container = ContainerPhase::kCreating;
  int restart_count = 0;
  absl::Time started_at;        // the current (or last) run's start
  std::string container_id;     // while running
  Json terminated;              // state.terminated, with kTerminated
  Json last_terminated;         // lastState.terminated; null: none yet
  std::string waiting_message;  // CrashLoopBackOff's, with kBackOff; why kCreating waits
  std::string waiting_reason;   // with kCreating: "" for ContainerCreating
};

// `pod`'s status with the fields a kubelet owns replaced (phase, IPs, startTime, the
// PodScheduled (if missing), Initialized, ContainersReady, Ready and DisruptionTarget
// conditions, containerStatuses); other conditions and fields are kept.
Json PodStatus(const Json& pod, const PodReport& report, absl::Time now);

// A container's state.terminated.
Json TerminatedState(int exit_code, std::optional<int> signal, const std::string& reason,
                     const std::string& message, absl::Time started, absl::Time finished);

// Sets condition `type` in status.conditions (added if missing), keeping lastTransitionTime
// unless the status flips.
void SetCondition(Json& status, const std::string& type, bool value, const std::string& reason,
                  const std::string& message, absl::Time now);

// A Node as registered: labels (plus kubernetes.io/hostname) and spec.taints.
Json NewNodeObject(const std::string& name, const std::map<std::string, std::string>& labels,
                   const std::vector<Json>& taints);

// Adds the spot-preemption taint (cloud.google.com/impending-node-termination=true:
// NoSchedule) to `node`; false when it is already there.
bool AddPreemptionTaint(Json& node, absl::Time now);

struct NodeReport {
  std::string name;
  int gpus = 0;
  bool simulated = false;
  bool ready = true;
  std::string ip = "127.0.0.1";  // InternalIP
};

// The node's status from `old_status`: capacity and allocatable (nvidia.com/gpu, cpu, memory,
// pods), the Ready condition (heartbeat refreshed once `heartbeat_period` old), addresses
// (InternalIP: report.ip) and nodeInfo.
Json NodeStatus(const Json& old_status, const NodeReport& report, absl::Time now,
                absl::Duration heartbeat_period);

}  // namespace phalanx::localcluster
