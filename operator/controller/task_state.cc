#include "operator/controller/task_state.h"

#include "operator/controller/failure_policy.h"

namespace phalanx::op {
namespace {

bool RanBefore(const PlanInputs& in, const TaskStatus& task) {
  return task.pod == TaskPodName(JobName(in), task.index, task.incarnation) &&
         (task.state == TaskState::kRunning || task.state == TaskState::kTerminating ||
          task.state == TaskState::kPreempting);
}

void ClassifyMissingPod(const PlanInputs& in, TaskRecord& record) {
  TaskStatus& task = record.status;
  if (!RanBefore(in, task)) {
    task.state = TaskState::kPending;
    record.event = TaskEvent::kNoPod;
  } else if (task.preempting_since.has_value()) {
    record.event = TaskEvent::kPreemptedAndGone;
    record.preemption_reason = "Evicted";
  } else {
    record.event = TaskEvent::kFailed;
    record.failure.name = task.pod;
    record.failure.reason = "PodDeleted";
  }
}

}  // namespace

void ClassifyTask(const PlanInputs& in, TaskRecord& record) {
  TaskStatus& task = record.status;
  if (!record.pod.has_value()) return ClassifyMissingPod(in, record);
  const PodView& pod = *record.pod;
  const PreemptionPolicy& policy = in.spec.preemption;
  auto node = in.world.preempting_nodes.find(pod.node);
  const bool on_preempted_node = policy.on_node_taints && node != in.world.preempting_nodes.end();
  if (on_preempted_node) record.node_deadline = node->second;
  const bool disrupted = policy.on_disruption_target && pod.disruption_target;
  if (pod.being_deleted) {
    task.state = TaskState::kTerminating;
    if (pod.disruption_target && !task.preempting_since.has_value()) task.preempting_since = in.now;
    return;
  }
  task.pod = pod.name;
  task.node = pod.node;
  auto reported = in.world.coordinator_failed.find(task.index);
  const bool coordinator_says_failed = reported != in.world.coordinator_failed.end() &&
                                       reported->second.incarnation == task.incarnation;
  const bool failed = pod.phase == PodPhase::kFailed;
  if (pod.phase == PodPhase::kSucceeded) {
    task.state = TaskState::kSucceeded;
    task.preempting_since.reset();
  } else if ((on_preempted_node || disrupted) ||
             (failed && (pod.reason == "Evicted" || task.preempting_since.has_value()))) {
    record.event = TaskEvent::kPreempted;
    record.preemption_reason = on_preempted_node ? "NodePreempted"
                               : disrupted       ? "DisruptionTarget"
                                                 : "Evicted";
  } else if (failed || coordinator_says_failed) {
    record.failure = pod;
    if (!failed) {
      // The pod looks fine; the coordinator saw the task hang, lose its session or report an
      // error. Say so, with the coordinator's words, in the reason and the Event.
      record.failure.reason = "CoordinatorDeclaredFailed";
      record.failure.message = reported->second.reason;
    }
    record.event = ClassifyFailure(in.spec.failure_policy, pod) == FailureClass::kFatal
                       ? TaskEvent::kFatal
                       : TaskEvent::kFailed;
  } else {
    task.state = pod.phase == PodPhase::kRunning ? TaskState::kRunning : TaskState::kPending;
  }
}

Next ClassifyTasks(const PlanInputs& in, JobPass& pass) {
  for (TaskRecord& record : pass.tasks) {
    ClassifyTask(in, record);
    if (record.event != TaskEvent::kNone || !record.pod.has_value() || record.pod->being_deleted) {
      continue;  // only a pod that is running or done counts
    }
    const TaskState state = record.status.state;
    if (state == TaskState::kSucceeded) ++pass.succeeded;
    if (state == TaskState::kRunning) ++pass.running;
    if (state == TaskState::kRunning && record.pod->ready) ++pass.ready;
  }
  pass.out.status.ready_tasks = pass.ready;
  return Next::kContinue;
}

}  // namespace phalanx::op
