#include "operator/controller/children.h"

#include "absl/strings/str_cat.h"

namespace phalanx::op {

Next EnsureJobChildren(const PlanInputs& in, JobPass& pass) {
  ReconcilePlan& out = pass.out;
  const JobObservation& world = in.world;
  if (!world.has_secret) out.create.push_back(DesiredSecret(in.job, in.token));
  if (!world.has_tasks_service) out.create.push_back(DesiredTasksService(in.job));
  if (!world.has_coordinator_service) {
    out.create.push_back(DesiredCoordinatorService(in.job, in.placement));
  }
  std::string coordinator_ip;
  if (!world.coordinator.has_value()) {
    out.create.push_back(DesiredCoordinatorPod(in.job, in.spec, in.placement));
  } else if (world.coordinator->ended()) {
    if (!world.coordinator->being_deleted) {
      out.delete_pods.push_back(world.coordinator->name);
      out.events.push_back(
          {true, "CoordinatorRestarted",
           absl::StrCat("coordinator ", Describe(*world.coordinator), "; recreating it")});
    }
    out.requeue_after = absl::Seconds(1);
  } else if (world.coordinator->phase == PodPhase::kRunning) {
    coordinator_ip = world.coordinator->ip;
  }
  pass.coordinator_address = CoordinatorAddress(in.job, in.placement, coordinator_ip);
  for (const TaskRecord& record : pass.tasks) {
    for (const PodView& old : record.stale) {
      if (!old.being_deleted) out.delete_pods.push_back(old.name);
    }
  }
  return Next::kContinue;
}

Next EnsureTaskPods(const PlanInputs& in, JobPass& pass) {
  if (pass.coordinator_address.empty()) return Next::kContinue;
  for (TaskRecord& record : pass.tasks) {
    if (record.event != TaskEvent::kNoPod) continue;
    TaskStatus& task = record.status;
    pass.out.create.push_back(
        DesiredTaskPod(in.job, in.spec, task.index, task.incarnation, pass.coordinator_address));
    task.pod = TaskPodName(JobName(in), task.index, task.incarnation);
  }
  return Next::kContinue;
}

}  // namespace phalanx::op
