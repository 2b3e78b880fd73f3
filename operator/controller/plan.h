// PlanReconcile: one reconcile pass as a pure function. Given the job, its decoded spec, the
// status written last time and what the cluster shows now, it returns what to create and delete,
// the status to write, the Events to record and when to look again. The reconciler executes the
// plan; every policy decision (restart scope, maxRestarts, back-off, fatal vs retryable exit
// codes, preemption, success policy, suspend, goodput) lives here and is table-tested.
#pragma once

#include <string>
#include <vector>

#include "absl/time/time.h"
#include "operator/api/types.h"
#include "operator/controller/desired_state.h"
#include "operator/controller/observe.h"

namespace phalanx::op {

struct EventNote {
  bool warning = false;
  std::string reason;
  std::string message;
};

// A task pod created in place of one that failed or was preempted (not a first creation).
struct Replacement {
  int task = 0;
  bool preemption = false;
  std::string reason;  // bounded: a pod reason, "Preempted" reasons below, "JobRestart", ...
};

struct ReconcilePlan {
  std::vector<Json> create;              // in order: Secret, Services, coordinator, task pods
  std::vector<std::string> delete_pods;  // pod names (tasks or the coordinator)
  std::vector<Replacement> replacements;  // for metrics: restarts and preemptions by reason
  TrainingJobStatus status;
  std::vector<EventNote> events;
  absl::Duration requeue_after = absl::ZeroDuration();  // zero: only on the next change
};

struct PlanInputs {
  const Json& job;
  const TrainingJobSpec& spec;
  const TrainingJobStatus& previous;
  const JobObservation& world;
  const CoordinatorPlacement& placement;
  std::string token;  // for a Secret that does not exist yet
  absl::Time now;
};

ReconcilePlan PlanReconcile(const PlanInputs& in);

// The wait before restart number `restarts_so_far + 1`: none for the first, then base·2^(k-1)
// capped at max.
absl::Duration RestartBackoff(const BackoffSpec& backoff, int restarts_so_far);

enum class FailureClass { kRetryable, kFatal };
FailureClass ClassifyFailure(const FailurePolicy& policy, const PodView& pod);

}  // namespace phalanx::op
