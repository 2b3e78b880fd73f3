// Agent: one node's phalanx-agent, as a tick (CONVENTIONS "Time"): main.cc drives Tick(now) from
// a PeriodicRunner every poll interval; tests call it directly.
//
// Each tick:
//   1. polls every notice source (GCE/AWS metadata, SIGTERM, the node's own taints). The first
//      notice taints the node phalanx.dev/preempting=<source>:NoSchedule and records a
//      PreemptionNotice Event; phalanx-operator watches nodes and, within its own reaction time,
//      opens a preemption round on the coordinator of every job with a task here (every task
//      checkpoints at one step) and moves those tasks. The agent reads no job Secrets: that is
//      why it goes through the Node (see docs/adr/0002-agent-notices-through-the-node.md).
//      A taint that failed to land is retried on the next tick. A preemption notice is sticky
//      (the node goes away); a maintenance notice ends when its source stops reporting it (GCE
//      maintenance-event back to NONE, a drain undone): the agent then lifts its taint, so the
//      node takes new tasks again — also when the window began under an earlier agent process
//      (the taint's notice-kind annotation says maintenance and names the source). A
//      preemption notice replaces a maintenance one. Failures
//      are counted every poll and logged by kind, rate-limited (source_error_log.h). Sources
//      that do I/O run on threads of their own (preemption/background_source.h), so this tick
//      never waits on a slow metadata or API server.
//   2. ticks the GPU health tracker: a GPU that newly failed (fatal XID, uncorrected ECC, lost)
//      records a GpuFailed Event and asks the tasks whose cliques use that GPU to abort them
//      (through the local clique registry); with the `node` policy it also taints the node
//      phalanx.dev/gpu-failed, which moves every task there (a preemption to the operator), with
//      `task` only the tasks asked to abort leave (the device plugin keeps the GPU out);
//   3. runs the node checks (transparent huge pages, driver, CUDA version guard);
//   4. writes the Phalanx Node conditions when they changed, and updates the metrics.
// Without Kubernetes access (marker null) it still checks, counts and logs.
// Thread-compatible: Tick runs on one thread.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "node_agent/agent_metrics.h"
#include "node_agent/cliques/clique_registry.h"
#include "node_agent/gpu/gpu_health_tracker.h"
#include "node_agent/gpu/node_checks.h"
#include "node_agent/node_marker.h"
#include "node_agent/preemption/notice_source.h"
#include "node_agent/source_error_log.h"

namespace phalanx::agent {

// What a failed GPU does to its node's other tasks (--gpu_failure_policy).
enum class GpuFailurePolicy {
  kNode,  // taint the node: every task on it checkpoints and moves (a node that lost a GPU is
          // often about to lose more: XID 79 usually wants a reboot)
  kTask,  // no taint: only the tasks whose cliques use the GPU are asked to abort and leave
};
// "node" or "task"; InvalidArgument otherwise.
absl::StatusOr<GpuFailurePolicy> ParseGpuFailurePolicy(absl::string_view name);

struct AgentOptions {
  std::string thp_path = kThpEnabledPath;
  std::string required_cuda;  // "12.4": flag a driver that cannot run it; "" = no guard
  GpuFailurePolicy gpu_failure_policy = GpuFailurePolicy::kNode;
};

// Records a Kubernetes Event about this node (never fails the caller).
using NodeEventSink =
    std::function<void(bool warning, const std::string& reason, const std::string& message)>;

class Agent {
 public:
  // `marker` and `gpus` may be null (no API access; no NVML). `nvml_status` says why there is no
  // tracker (for the driver check and logs).
  Agent(AgentOptions options, AgentMetrics& metrics, NodeMarker* marker, NodeEventSink events,
        std::vector<std::unique_ptr<NoticeSource>> sources, GpuHealthTracker* gpus,
        absl::Status nvml_status, CliqueRegistry& cliques);

  void Tick(absl::Time now);

  // The notice acted on (first seen), if any.
  const std::optional<NodeNotice>& notice() const { return notice_; }
  // True once the node carries the preempting taint this agent put there.
  bool node_marked() const { return marked_; }

 private:
  void PollSources(absl::Time now);
  void TakeNotice(NodeNotice notice);
  void ClearNotice(const std::string& why);
  void FindLeftoverTaint();
  void LiftLeftoverTaintIfOver(const NoticeSource& source, const std::optional<NodeNotice>& seen);
  void TickGpus(absl::Time now);
  std::vector<NodeCondition> Conditions(const std::vector<CheckResult>& checks) const;

  const AgentOptions options_;
  AgentMetrics& metrics_;
  NodeMarker* const marker_;
  NodeEventSink events_;
  std::vector<std::unique_ptr<NoticeSource>> sources_;
  GpuHealthTracker* const gpus_;
  const absl::Status nvml_status_;
  CliqueRegistry& cliques_;

  std::optional<NodeNotice> notice_;
  bool marked_ = false;
  bool unmark_pending_ = false;  // a cleared notice's taint still to lift
  // A maintenance taint an earlier agent process on this node left (it crashed or was restarted
  // during the window): looked up once at start, and lifted by the rule for this process's own
  // (its source, answering, no longer reports maintenance). A preemption's taint stays.
  bool leftover_checked_ = false;
  std::string leftover_source_;  // the source that marked it; "" when there is none to watch
  std::vector<GpuHealthTracker::FailedGpu> failed_gpus_;
  std::vector<std::string> gpu_taints_pending_;  // failed GPUs whose taint did not land yet
  std::map<uint64_t, uint64_t> xids_seen_;
  std::vector<NodeCondition> written_conditions_;
  SourceErrorLog error_log_;
};

}  // namespace phalanx::agent
