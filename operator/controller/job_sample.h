// JobSample: one TrainingJob's status as the numbers of its per-job series
// (phalanx_operator_job_*, OperatorMetrics::SetJobs). The operator samples every job in its cache
// every few seconds (operator/main.cc); the numbers mirror status, so they survive an operator
// restart as the status does, and a new leader exports what the old one did. Pure.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/kube/json.h"

namespace phalanx::op {

// The causes of lost time (label `cause` of phalanx_operator_job_lost_seconds): the four that
// status.goodput keeps apart (controller/accounting.h) and the rest, time the job spent
// Restarting, or Starting or Blocked after it had run.
inline constexpr char kLostDetection[] = "detection";
inline constexpr char kLostCoordinatorOutage[] = "coordinator_outage";
inline constexpr char kLostRolledBack[] = "rolled_back";
inline constexpr char kLostRegroup[] = "regroup";
inline constexpr char kLostRecovery[] = "recovery";

struct JobSample {
  std::string ns;
  std::string name;
  std::string phase;  // Pending when status has none yet
  bool unschedulable = false;
  double productive_seconds = 0;
  double before_first_step_seconds = 0;        // neither productive nor lost
  std::map<std::string, double> lost_seconds;  // by cause; every cause present
  int restarts = 0;
  int rank_restarts = 0;  // in-pod rank restarts (nprocPerNode > 1): status.rankRestarts
  std::optional<double> last_recovery_seconds;  // status.lastRecoverySeconds
  int preemptions = 0;
  int coordinator_restarts = 0;
  int spares_total = 0;  // status.spares
  int spares_ready = 0;

  bool operator==(const JobSample&) const = default;
};

JobSample SampleJob(const kube::Json& job);

// The samples of every job, decoding a job's status again only when its resourceVersion changed
// (the sampler runs every few seconds over every job in the cache; decoding 1,000 statuses each
// time was most of an idle operator's CPU). Not thread-safe: one sampler owns it.
class JobSampleCache {
 public:
  // Call Add for every job, then Take: the samples of exactly the jobs added since the last Take.
  void Add(const kube::Json& job);
  std::vector<JobSample> Take();

 private:
  struct Entry {
    std::string resource_version;
    JobSample sample;
    bool seen = false;
  };
  std::map<std::string, Entry> entries_;  // by namespace/name
};

}  // namespace phalanx::op
