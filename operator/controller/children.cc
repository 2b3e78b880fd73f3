#include "operator/controller/children.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/auth/credentials.h"
#include "operator/api/codec.h"
#include "operator/controller/blocked.h"
#include "operator/controller/coordinator_move.h"
#include "operator/controller/failed_pods.h"
#include "operator/controller/task_credentials.h"

namespace phalanx::op {
namespace {

// Bounded so a long message cannot bloat the job's status (the CRD caps it at 4096).
constexpr size_t kMaxExitMessage = 1024;

// Records the ended coordinator pod `pod` in status.coordinator (once per pod: a pass that sees
// it again before its deletion shows counts nothing) and says when it may be recreated.
void CountCoordinatorRestart(const PlanInputs& in, JobPass& pass, const PodView& pod) {
  CoordinatorStatus& c = pass.out.status.coordinator;
  if (!pod.uid.empty() && c.last_failed_pod == pod.uid) return;
  // A pod moved off a preempted node (coordinator_move.h) ended because of the move.
  if (!pod.uid.empty() && c.last_moved_pod == pod.uid) return;
  // The delay doubles for each restart that follows the last within kCoordinatorBackoffReset;
  // a coordinator that stayed up longer than that starts again from the first delay.
  absl::Duration delay = kCoordinatorFirstBackoff;
  if (c.last_restart_time.has_value() && c.restart_after.has_value() &&
      in.now - *c.last_restart_time < kCoordinatorBackoffReset) {
    delay = std::clamp((*c.restart_after - *c.last_restart_time) * 2, kCoordinatorFirstBackoff,
                       kCoordinatorMaxBackoff);
  }
  ++c.restarts;
  c.last_exit_code = pod.exit_code;
  c.last_exit_reason = pod.reason;
  c.last_exit_message = pod.message.substr(0, kMaxExitMessage);
  c.last_restart_time = in.now;
  c.restart_after = in.now + delay;
  c.last_failed_pod = pod.uid;
  pass.out.events.push_back(
      {true, "CoordinatorRestarted",
       absl::StrCat("coordinator ", Describe(pod), "; recreating it in ",
                    absl::FormatDuration(delay), " (restart ", c.restarts, ")")});
}

}  // namespace

bool JobUsesTls(const TrainingJobStatus& status, const JobObservation& world, bool operator_tls) {
  if (status.coordinator.tls.has_value()) return *status.coordinator.tls;
  if (world.coordinator.has_value()) return world.coordinator->serves_tls;
  if (FindCondition(status.conditions, kConditionChildrenReady).has_value()) return false;
  return operator_tls;
}

Next EnsureJobChildren(const PlanInputs& in, JobPass& pass) {
  ReconcilePlan& out = pass.out;
  const JobObservation& world = in.world;
  const bool tls = JobUsesTls(out.status, world, in.placement.tls);
  out.status.coordinator.tls = tls;
  const bool bound = JobUsesBoundCredentials(
      out.status, world.coordinator.has_value() ||
                      FindCondition(out.status.conditions, kConditionChildrenReady).has_value());
  out.status.incarnation_bound_credentials = bound;
  CoordinatorPlacement placement = in.placement;
  placement.tls = tls;
  if (!world.has_secret) {
    out.create.push_back(DesiredSecret(in.job, in.spec, in.token, in.agent_clique_key,
                                       tls ? in.tls_files : nullptr, bound));
  }
  if (!world.has_network_policy && in.network_policy != nullptr) {
    out.create.push_back(DesiredCoordinatorNetworkPolicy(in.job, in.placement, *in.network_policy));
  }
  if (!world.has_tasks_service) out.create.push_back(DesiredTasksService(in.job));
  if (!world.has_coordinator_service) {
    out.create.push_back(DesiredCoordinatorService(in.job, in.placement));
  }
  std::string coordinator_ip;
  const std::optional<absl::Time>& restart_after = out.status.coordinator.restart_after;
  if (!world.coordinator.has_value()) {
    if (restart_after.has_value() && in.now < *restart_after) {
      RequeueWithin(pass, *restart_after - in.now);  // backing off after it ended
    } else {
      out.create.push_back(
          DesiredCoordinatorPod(in.job, in.spec, placement, in.token, NodesToAvoid(in.world)));
    }
  } else if (world.coordinator->ended()) {
    if (!world.coordinator->being_deleted) {
      out.delete_pods.push_back(world.coordinator->name);
      CountCoordinatorRestart(in, pass, *world.coordinator);
    }
    RequeueWithin(pass, std::max(absl::Seconds(1), restart_after.value_or(in.now) - in.now));
  } else if (world.coordinator->phase == PodPhase::kRunning) {
    coordinator_ip = world.coordinator->ip;
  }
  pass.coordinator_address = CoordinatorAddress(in.job, in.placement, coordinator_ip);
  pass.coordinator_unproven = world.coordinator_unproven;
  // The refusal stands until a coordinator pod created after it is seen (a move is no refusal).
  const CoordinatorStatus& c = out.status.coordinator;
  const bool refused_pod_is_the_last = world.coordinator.has_value()
                                           ? world.coordinator->uid == c.last_failed_pod
                                           : c.moving_from.empty();
  if (c.last_exit_code == auth::kExitTokenMismatch && refused_pod_is_the_last) {
    out.secret_conflict = absl::StrCat(
        "it exists, and its coordinator refused the token in it (exit code ",
        auth::kExitTokenMismatch,
        ": not the one the operator derived for this job); something "
        "other than the operator wrote a Secret of that name. Delete it: the operator creates "
        "its own");
  }
  for (const TaskRecord& record : pass.tasks) {
    for (std::string& name :
         StalePodsToDelete(record.stale, in.spec.failure_policy.keep_failed_pods)) {
      out.delete_pods.push_back(std::move(name));
    }
  }
  return Next::kContinue;
}

namespace {

// Task pods wait for the coordinator's first answer (observe.h coordinator_unproven); past this
// the wait is told on the job, since only the operator's log would say it otherwise.
constexpr absl::Duration kUnansweredGrace = absl::Seconds(30);

// The coordinator runs but has not answered the operator's link while task pods wait for it: a
// Warning Event once it has been kUnansweredGrace (a NetworkPolicy of the cluster's own between
// the operator and the job, a coordinator that refuses the job's token), and a look again then.
void TellAnUnansweredCoordinator(const PlanInputs& in, JobPass& pass) {
  const std::optional<PodView>& coordinator = in.world.coordinator;
  if (!pass.coordinator_unproven || !coordinator.has_value() ||
      coordinator->phase != PodPhase::kRunning || coordinator->created == absl::InfiniteFuture()) {
    return;
  }
  const bool waiting = std::any_of(pass.tasks.begin(), pass.tasks.end(), [](const TaskRecord& r) {
    return r.event == TaskEvent::kNoPod;
  });
  if (!waiting) return;
  const absl::Time due = coordinator->created + kUnansweredGrace;
  if (in.now < due) {
    RequeueWithin(pass, due - in.now);
    return;
  }
  pass.out.events.push_back(
      {true, "CoordinatorUnanswered",
       absl::StrCat(
           "task pods wait for coordinator pod ", coordinator->name,
           " to answer the operator with the job's token; it has not for ",
           absl::FormatDuration(absl::Trunc(in.now - coordinator->created, absl::Seconds(1))),
           " (the operator's log says why: 'coordinator link')")});
  RequeueWithin(pass, kUnansweredGrace);
}

}  // namespace

Next EnsureTaskPods(const PlanInputs& in, JobPass& pass) {
  TellAnUnansweredCoordinator(in, pass);
  if (!pass.MayCreateTaskPods()) return Next::kContinue;
  for (TaskRecord& record : pass.tasks) {
    if (record.event != TaskEvent::kNoPod) continue;
    TaskStatus& task = record.status;
    pass.out.create.push_back(NewTaskPod(in, pass, task.index, task.incarnation));
    task.pod = TaskPodName(JobName(in), task.index, task.incarnation);
  }
  return Next::kContinue;
}

}  // namespace phalanx::op
