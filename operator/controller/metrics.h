// OperatorMetrics: the `phalanx_operator_*` Prometheus families on an injected registry.
// Thread-safe (prometheus-cpp metrics are; the per-label maps are guarded).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/kube/controller.h"
#include "operator/controller/job_sample.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"

namespace phalanx::op {

class OperatorMetrics {
 public:
  explicit OperatorMetrics(prometheus::Registry& registry);

  // One pass of the controller (kube::Controller::Options::observe_pass).
  void Reconciled(kube::ReconcileResult result, absl::Duration took);
  void SetQueueDepth(int depth) { queue_depth_.Set(depth); }
  void TaskRestarted(const std::string& reason);
  void Preempted(const std::string& reason);
  // Failure observed → replacement pod created.
  void ReplacementCreated(absl::Duration since_failure_seen);
  // A recovery ended: a task's failure (or move) until its replacement registered with the
  // coordinator (controller/recovery_time.h).
  void Recovered(double seconds) { recovery_seconds_.Observe(seconds); }
  void ApiRequest(const std::string& verb, int code);
  // A job coordinator's TLS certificate issued (for a pass that creates the job's Secret).
  void CoordinatorCertificateIssued() { certificates_issued_.Increment(); }
  // Goodput booked by a status write: the changes of status.productiveSeconds and lostSeconds.
  // Productive time found lost later (controller/accounting.h) makes the first negative: a
  // counter cannot go down, so that part counts in phalanx_operator_rebooked_seconds_total.
  void Goodput(double productive_seconds, double lost_seconds);
  // Every job in the cache, sampled: the cluster-wide gauges (phalanx_operator_jobs by phase,
  // phalanx_operator_jobs_unschedulable: jobs whose condition Unschedulable is True) and the
  // per-job series (labels namespace and trainingjob): its phase (one series, value 1, label
  // phase), Unschedulable (0/1), productive seconds, lost seconds by cause, restarts,
  // in-pod rank restarts, preemptions, coordinator restarts and (once there was one) the last
  // recovery's length, as status has them. Twelve series per job; a job not in
  // `jobs` (deleted) loses its series. Both from one sample, so they never disagree.
  void SetJobs(const std::vector<JobSample>& jobs);

 private:
  void SetJobsByPhaseLocked(const std::map<std::string, int>& counts)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // One job's series, so that they can be updated in place and removed with the job.
  struct JobSeries {
    // The sample its gauges show (nullopt: none yet); an equal one sets nothing.
    std::optional<JobSample> shown;
    uint64_t sampled = 0;  // the SetJobs round that last saw the job
    std::string phase;
    prometheus::Gauge* phase_gauge = nullptr;
    prometheus::Gauge* unschedulable = nullptr;
    prometheus::Gauge* productive = nullptr;
    prometheus::Gauge* before_first_step = nullptr;
    std::map<std::string, prometheus::Gauge*> lost;  // by cause
    prometheus::Gauge* restarts = nullptr;
    prometheus::Gauge* rank_restarts = nullptr;
    prometheus::Gauge* last_recovery = nullptr;
    prometheus::Gauge* preemptions = nullptr;
    prometheus::Gauge* coordinator_restarts = nullptr;
    prometheus::Gauge* spares_ready = nullptr;  // only for a job that has had spares
    prometheus::Gauge* spares_starting = nullptr;
  };
  // Points `series`'s gauges at `job`.
  void ShowJobLocked(const JobSample& job, JobSeries& series) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Removes a gone job's series from their families.
  void RemoveJobSeriesLocked(const JobSeries& series) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  prometheus::Registry& registry_;
  prometheus::Family<prometheus::Counter>& reconciles_;
  prometheus::Counter& reconciles_ok_;
  prometheus::Counter& reconciles_error_;
  prometheus::Counter& reconciles_conflict_;
  prometheus::Histogram& reconcile_seconds_;
  prometheus::Gauge& queue_depth_;
  prometheus::Family<prometheus::Gauge>& jobs_;
  prometheus::Gauge& unschedulable_jobs_;
  prometheus::Family<prometheus::Counter>& restarts_;
  prometheus::Family<prometheus::Counter>& preemptions_;
  prometheus::Histogram& replacement_seconds_;
  prometheus::Histogram& recovery_seconds_;
  prometheus::Family<prometheus::Counter>& api_requests_;
  prometheus::Counter& certificates_issued_;
  prometheus::Counter& productive_seconds_;
  prometheus::Counter& lost_seconds_;
  prometheus::Counter& rebooked_seconds_;
  prometheus::Family<prometheus::Gauge>& job_phase_;
  prometheus::Family<prometheus::Gauge>& job_unschedulable_;
  prometheus::Family<prometheus::Gauge>& job_productive_;
  prometheus::Family<prometheus::Gauge>& job_lost_;
  prometheus::Family<prometheus::Gauge>& job_restarts_;
  prometheus::Family<prometheus::Gauge>& job_preemptions_;
  prometheus::Family<prometheus::Gauge>& job_coordinator_restarts_;
  prometheus::Family<prometheus::Gauge>& job_rank_restarts_;
  prometheus::Family<prometheus::Gauge>& job_last_recovery_;
  prometheus::Family<prometheus::Gauge>& job_before_first_step_;
  prometheus::Family<prometheus::Gauge>& job_spares_;
  absl::Mutex mu_;
  std::map<std::string, prometheus::Counter*> restart_counters_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, prometheus::Counter*> preemption_counters_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, prometheus::Counter*> api_counters_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, prometheus::Gauge*> phase_gauges_ ABSL_GUARDED_BY(mu_);
  // By "namespace/name".
  std::map<std::string, JobSeries> job_series_ ABSL_GUARDED_BY(mu_);
  uint64_t sample_round_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace phalanx::op
