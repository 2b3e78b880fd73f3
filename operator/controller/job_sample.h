// JobSample: one TrainingJob's status as the numbers of its per-job series
// (phalanx_operator_job_*, OperatorMetrics::SetJobs). The operator samples every job in its cache
// every few seconds (operator/main.cc); the numbers mirror status, so they survive an operator
// restart as the status does, and a new leader exports what the old one did. Pure.
#pragma once

#include <map>
#include <optional>
#include <string>

#include "common/kube/json.h"

namespace phalanx::op {

// The causes of lost time (label `cause` of phalanx_operator_job_lost_seconds): the three that
// status.goodput keeps apart (controller/accounting.h) and the rest, time the job spent
// Restarting, or Starting or Blocked after it had run.
inline constexpr char kLostDetection[] = "detection";
inline constexpr char kLostCoordinatorOutage[] = "coordinator_outage";
inline constexpr char kLostRolledBack[] = "rolled_back";
inline constexpr char kLostRecovery[] = "recovery";

struct JobSample {
  std::string ns;
  std::string name;
  std::string phase;  // Pending when status has none yet
  bool unschedulable = false;
  double productive_seconds = 0;
  std::map<std::string, double> lost_seconds;  // by cause; every cause present
  int restarts = 0;
  int rank_restarts = 0;  // in-pod rank restarts (nprocPerNode > 1): status.rankRestarts
  std::optional<double> last_recovery_seconds;  // status.lastRecoverySeconds
  int preemptions = 0;
  int coordinator_restarts = 0;

  bool operator==(const JobSample&) const = default;
};

JobSample SampleJob(const kube::Json& job);

}  // namespace phalanx::op
