#include "operator/controller/metrics.h"

#include "absl/strings/str_cat.h"

namespace phalanx::op {
namespace {

prometheus::Histogram::BucketBoundaries LatencyBuckets() {
  return {0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10};
}

}  // namespace

OperatorMetrics::OperatorMetrics(prometheus::Registry& registry)
    : registry_(registry),
      reconciles_(prometheus::BuildCounter()
                      .Name("phalanx_operator_reconciles_total")
                      .Help("Reconcile passes by result")
                      .Register(registry)),
      reconciles_ok_(reconciles_.Add({{"result", "ok"}})),
      reconciles_error_(reconciles_.Add({{"result", "error"}})),
      reconcile_seconds_(prometheus::BuildHistogram()
                             .Name("phalanx_operator_reconcile_duration_seconds")
                             .Help("Time one reconcile pass took")
                             .Register(registry)
                             .Add({}, LatencyBuckets())),
      queue_depth_(prometheus::BuildGauge()
                       .Name("phalanx_operator_queue_depth")
                       .Help("Jobs waiting in the work queue")
                       .Register(registry)
                       .Add({})),
      jobs_(prometheus::BuildGauge()
                .Name("phalanx_operator_jobs")
                .Help("TrainingJobs by phase")
                .Register(registry)),
      unschedulable_jobs_(prometheus::BuildGauge()
                              .Name("phalanx_operator_jobs_unschedulable")
                              .Help("TrainingJobs with condition Unschedulable=True: a task pod "
                                    "that no node can take")
                              .Register(registry)
                              .Add({})),
      restarts_(prometheus::BuildCounter()
                    .Name("phalanx_operator_task_restarts_total")
                    .Help("Task restarts by reason")
                    .Register(registry)),
      preemptions_(prometheus::BuildCounter()
                       .Name("phalanx_operator_preemptions_total")
                       .Help("Tasks moved off preempted nodes, by reason")
                       .Register(registry)),
      replacement_seconds_(prometheus::BuildHistogram()
                               .Name("phalanx_operator_replacement_latency_seconds")
                               .Help("From a task failure observed to its replacement pod created")
                               .Register(registry)
                               .Add({}, LatencyBuckets())),
      api_requests_(prometheus::BuildCounter()
                        .Name("phalanx_operator_api_requests_total")
                        .Help("Kubernetes API requests by verb and HTTP code (0: transport error)")
                        .Register(registry)),
      productive_seconds_(prometheus::BuildCounter()
                              .Name("phalanx_operator_productive_seconds_total")
                              .Help("Job-seconds with every task running (goodput), all jobs")
                              .Register(registry)
                              .Add({})),
      lost_seconds_(prometheus::BuildCounter()
                        .Name("phalanx_operator_lost_seconds_total")
                        .Help("Job-seconds lost to failures, restarts, preemptions, coordinator "
                              "outages and rolled-back work, all jobs")
                        .Register(registry)
                        .Add({})),
      rebooked_seconds_(prometheus::BuildCounter()
                            .Name("phalanx_operator_rebooked_seconds_total")
                            .Help("Job-seconds first counted productive, then found lost (a "
                                  "failure found late, rolled-back work), all jobs")
                            .Register(registry)
                            .Add({})) {}

void OperatorMetrics::Reconciled(bool ok, absl::Duration took) {
  (ok ? reconciles_ok_ : reconciles_error_).Increment();
  reconcile_seconds_.Observe(absl::ToDoubleSeconds(took));
}

void OperatorMetrics::SetJobsByPhase(const std::map<std::string, int>& counts) {
  absl::MutexLock lock(&mu_);
  for (auto& [phase, gauge] : phase_gauges_) gauge->Set(0);
  for (const auto& [phase, count] : counts) {
    prometheus::Gauge*& g = phase_gauges_[phase];
    if (g == nullptr) g = &jobs_.Add({{"phase", phase}});
    g->Set(count);
  }
}

void OperatorMetrics::TaskRestarted(const std::string& reason) {
  absl::MutexLock lock(&mu_);
  prometheus::Counter*& c = restart_counters_[reason];
  if (c == nullptr) c = &restarts_.Add({{"reason", reason}});
  c->Increment();
}

void OperatorMetrics::Preempted(const std::string& reason) {
  absl::MutexLock lock(&mu_);
  prometheus::Counter*& c = preemption_counters_[reason];
  if (c == nullptr) c = &preemptions_.Add({{"reason", reason}});
  c->Increment();
}

void OperatorMetrics::ReplacementCreated(absl::Duration since_failure_seen) {
  replacement_seconds_.Observe(absl::ToDoubleSeconds(since_failure_seen));
}

void OperatorMetrics::Goodput(double productive_seconds, double lost_seconds) {
  if (productive_seconds > 0) productive_seconds_.Increment(productive_seconds);
  if (productive_seconds < 0) rebooked_seconds_.Increment(-productive_seconds);
  if (lost_seconds > 0) lost_seconds_.Increment(lost_seconds);
}

void OperatorMetrics::ApiRequest(const std::string& verb, int code) {
  const std::string key = absl::StrCat(verb, "/", code);
  absl::MutexLock lock(&mu_);
  prometheus::Counter*& c = api_counters_[key];
  if (c == nullptr) c = &api_requests_.Add({{"verb", verb}, {"code", absl::StrCat(code)}});
  c->Increment();
}

}  // namespace phalanx::op
