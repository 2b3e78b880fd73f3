#include "operator/controller/metrics.h"

#include "absl/strings/str_cat.h"
#include "operator/api/types.h"

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
      reconciles_conflict_(reconciles_.Add({{"result", "conflict"}})),
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
      recovery_seconds_(
          prometheus::BuildHistogram()
              .Name("phalanx_operator_recovery_seconds")
              .Help("From a task's failure (or move off a preempted node) to its "
                    "replacement registered with the coordinator")
              .Register(registry)
              .Add({}, prometheus::Histogram::BucketBoundaries{0.25, 0.5, 1, 2, 5, 10, 20, 30, 60,
                                                               120, 300, 600})),
      api_requests_(prometheus::BuildCounter()
                        .Name("phalanx_operator_api_requests_total")
                        .Help("Kubernetes API requests by verb and HTTP code (0: transport error)")
                        .Register(registry)),
      certificates_issued_(prometheus::BuildCounter()
                               .Name("phalanx_operator_coordinator_certificates_issued_total")
                               .Help("Job coordinators' TLS certificates issued by the operator's "
                                     "CA (one per job Secret written)")
                               .Register(registry)
                               .Add({})),
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
                                  "failure found late, a regroup, rolled-back work) or before "
                                  "the first step, all jobs")
                            .Register(registry)
                            .Add({})),
      job_phase_(prometheus::BuildGauge()
                     .Name("phalanx_operator_job_phase")
                     .Help("1 for each TrainingJob, labelled with its phase")
                     .Register(registry)),
      job_unschedulable_(prometheus::BuildGauge()
                             .Name("phalanx_operator_job_unschedulable")
                             .Help("1 while the TrainingJob's condition Unschedulable is True (a "
                                   "task pod that no node can take), else 0")
                             .Register(registry)),
      job_productive_(prometheus::BuildGauge()
                          .Name("phalanx_operator_job_productive_seconds")
                          .Help("The TrainingJob's seconds with every task running "
                                "(status.productiveSeconds; goes down when time is found lost)")
                          .Register(registry)),
      job_lost_(prometheus::BuildGauge()
                    .Name("phalanx_operator_job_lost_seconds")
                    .Help("The TrainingJob's lost seconds by cause: detection (failure to "
                          "reaction), coordinator_outage, rolled_back (discarded work), regroup "
                          "(Running until the workers stepped again), recovery (Restarting, or "
                          "Starting after it had run)")
                    .Register(registry)),
      job_restarts_(prometheus::BuildGauge()
                        .Name("phalanx_operator_job_restarts")
                        .Help("The TrainingJob's task restarts (status.restarts)")
                        .Register(registry)),
      job_preemptions_(prometheus::BuildGauge()
                           .Name("phalanx_operator_job_preemptions")
                           .Help("The TrainingJob's tasks moved off preempted nodes "
                                 "(status.preemptions)")
                           .Register(registry)),
      job_coordinator_restarts_(prometheus::BuildGauge()
                                    .Name("phalanx_operator_job_coordinator_restarts")
                                    .Help("The TrainingJob's coordinator restarts after a failure "
                                          "(status.coordinator.restarts)")
                                    .Register(registry)),
      job_rank_restarts_(prometheus::BuildGauge()
                             .Name("phalanx_operator_job_rank_restarts")
                             .Help("The TrainingJob's ranks restarted inside their pods by "
                                   "phalanx-launch (nprocPerNode > 1; status.rankRestarts)")
                             .Register(registry)),
      job_last_recovery_(prometheus::BuildGauge()
                             .Name("phalanx_operator_job_last_recovery_seconds")
                             .Help("The TrainingJob's last recovery: a task's failure or move "
                                   "until its replacement registered with the coordinator "
                                   "(status.lastRecoverySeconds)")
                             .Register(registry)),
      job_before_first_step_(
          prometheus::BuildGauge()
              .Name("phalanx_operator_job_before_first_step_seconds")
              .Help("The TrainingJob's time before its first step, neither productive nor lost: "
                    "Pending, its first start, and Running until the workers reported their "
                    "first step (status.goodput.beforeFirstStepSeconds)")
              .Register(registry)),
      job_spares_(prometheus::BuildGauge()
                      .Name("phalanx_operator_job_spares")
                      .Help("The TrainingJob's spare pods (spec.spares) by state: ready (waiting "
                            "with the coordinator for a task to take over) or starting "
                            "(status.spares)")
                      .Register(registry)) {
  // Every phase from the start, at 0: a panel or an alert on a phase no job is in reads 0, not
  // "no data" (a real Prometheus scraping the chart showed the dashboard's phase stats empty).
  absl::MutexLock lock(&mu_);
  for (const char* phase : {kPhasePending, kPhaseStarting, kPhaseRunning, kPhaseRestarting,
                            kPhaseBlocked, kPhaseSuspended, kPhaseSucceeded, kPhaseFailed}) {
    phase_gauges_[phase] = &jobs_.Add({{"phase", phase}});
  }
  // The same for the counters by reason: Prometheus' increase() and rate() start at a series'
  // first sample, so a series born at 1 hides its first event (the live dashboard's "Task
  // restarts by reason" read 0 after a kill). Every preemption reason, and the usual restart
  // reasons (others are a container's own words, e.g. ContainerCannotRun; their first is lost).
  for (const char* reason : {"NodePreempted", "DisruptionTarget", "Evicted"}) {
    preemption_counters_[reason] = &preemptions_.Add({{"reason", reason}});
  }
  for (const char* reason : {"Error", "OOMKilled", "CoordinatorDeclaredFailed", "PodDeleted"}) {
    restart_counters_[reason] = &restarts_.Add({{"reason", reason}});
  }
}

void OperatorMetrics::Reconciled(kube::ReconcileResult result, absl::Duration took) {
  switch (result) {
    case kube::ReconcileResult::kOk:
      reconciles_ok_.Increment();
      break;
    case kube::ReconcileResult::kConflict:
      reconciles_conflict_.Increment();
      break;
    case kube::ReconcileResult::kError:
      reconciles_error_.Increment();
      break;
  }
  reconcile_seconds_.Observe(absl::ToDoubleSeconds(took));
}

void OperatorMetrics::SetJobsByPhaseLocked(const std::map<std::string, int>& counts) {
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

void OperatorMetrics::SetJobs(const std::vector<JobSample>& jobs) {
  absl::MutexLock lock(&mu_);
  // Every few seconds over every job: a job whose sample did not change sets nothing, and the
  // series are kept in place (marked with this round) rather than rebuilt: at 1,000 jobs the
  // rebuild was a visible share of an idle operator's CPU.
  const uint64_t round = ++sample_round_;
  std::map<std::string, int> phases;
  int unschedulable = 0;
  for (const JobSample& job : jobs) {
    ++phases[job.phase];
    if (job.unschedulable) ++unschedulable;
    JobSeries& series = job_series_[absl::StrCat(job.ns, "/", job.name)];
    series.sampled = round;
    if (series.shown == job) continue;
    ShowJobLocked(job, series);
  }
  // What was not seen belongs to jobs that are gone.
  for (auto it = job_series_.begin(); it != job_series_.end();) {
    if (it->second.sampled == round) {
      ++it;
      continue;
    }
    RemoveJobSeriesLocked(it->second);
    it = job_series_.erase(it);
  }
  SetJobsByPhaseLocked(phases);
  unschedulable_jobs_.Set(unschedulable);
}

void OperatorMetrics::ShowJobLocked(const JobSample& job, JobSeries& series) {
  const prometheus::Labels labels{{"namespace", job.ns}, {"trainingjob", job.name}};
  auto add = [&labels](prometheus::Family<prometheus::Gauge>& family, prometheus::Gauge*& g,
                       prometheus::Labels extra = {}) {
    if (g != nullptr) return;
    prometheus::Labels all = labels;
    all.insert(extra.begin(), extra.end());
    g = &family.Add(all);
  };
  if (series.phase != job.phase && series.phase_gauge != nullptr) {
    job_phase_.Remove(series.phase_gauge);
    series.phase_gauge = nullptr;
  }
  series.phase = job.phase;
  add(job_phase_, series.phase_gauge, {{"phase", job.phase}});
  series.phase_gauge->Set(1);
  add(job_unschedulable_, series.unschedulable);
  series.unschedulable->Set(job.unschedulable ? 1 : 0);
  add(job_productive_, series.productive);
  series.productive->Set(job.productive_seconds);
  add(job_before_first_step_, series.before_first_step);
  series.before_first_step->Set(job.before_first_step_seconds);
  for (const auto& [cause, seconds] : job.lost_seconds) {
    add(job_lost_, series.lost[cause], {{"cause", cause}});
    series.lost[cause]->Set(seconds);
  }
  add(job_restarts_, series.restarts);
  series.restarts->Set(job.restarts);
  add(job_rank_restarts_, series.rank_restarts);
  series.rank_restarts->Set(job.rank_restarts);
  if (job.last_recovery_seconds.has_value()) {
    add(job_last_recovery_, series.last_recovery);
    series.last_recovery->Set(*job.last_recovery_seconds);
  }
  add(job_preemptions_, series.preemptions);
  series.preemptions->Set(job.preemptions);
  add(job_coordinator_restarts_, series.coordinator_restarts);
  series.coordinator_restarts->Set(job.coordinator_restarts);
  if (job.spares_total > 0 || series.spares_ready != nullptr) {
    add(job_spares_, series.spares_ready, {{"state", "ready"}});
    add(job_spares_, series.spares_starting, {{"state", "starting"}});
    series.spares_ready->Set(job.spares_ready);
    series.spares_starting->Set(std::max(0, job.spares_total - job.spares_ready));
  }
  series.shown = job;
}

void OperatorMetrics::RemoveJobSeriesLocked(const JobSeries& series) {
  if (series.phase_gauge != nullptr) job_phase_.Remove(series.phase_gauge);
  for (auto [family, gauge] : {std::pair{&job_unschedulable_, series.unschedulable},
                               std::pair{&job_productive_, series.productive},
                               std::pair{&job_before_first_step_, series.before_first_step},
                               std::pair{&job_restarts_, series.restarts},
                               std::pair{&job_rank_restarts_, series.rank_restarts},
                               std::pair{&job_last_recovery_, series.last_recovery},
                               std::pair{&job_preemptions_, series.preemptions},
                               std::pair{&job_coordinator_restarts_, series.coordinator_restarts},
                               std::pair{&job_spares_, series.spares_ready},
                               std::pair{&job_spares_, series.spares_starting}}) {
    if (gauge != nullptr) family->Remove(gauge);
  }
  for (const auto& [cause, gauge] : series.lost) job_lost_.Remove(gauge);
}

void OperatorMetrics::ApiRequest(const std::string& verb, int code) {
  const std::string key = absl::StrCat(verb, "/", code);
  absl::MutexLock lock(&mu_);
  prometheus::Counter*& c = api_counters_[key];
  if (c == nullptr) c = &api_requests_.Add({{"verb", verb}, {"code", absl::StrCat(code)}});
  c->Increment();
}

}  // namespace phalanx::op
