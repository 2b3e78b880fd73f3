#include "operator/controller/task_state.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "operator/controller/failure_policy.h"
#include "operator/controller/waiting_failure.h"

namespace phalanx::op {
namespace {

// `message` cut to status.tasks[].lastFailureMessage's bound, keeping the end (a log's last
// lines say most), never splitting a UTF-8 sequence.
std::string Bounded(const std::string& message) {
  if (message.size() <= kMaxFailureMessageBytes) return message;
  static constexpr char kCut[] = "...";
  size_t from = message.size() - (kMaxFailureMessageBytes - (sizeof(kCut) - 1));
  while (from < message.size() && (static_cast<unsigned char>(message[from]) & 0xC0) == 0x80) {
    ++from;
  }
  return kCut + message.substr(from);
}

// Fills in `record`'s failure as `failure` and classifies it by the failure policy.
void Fail(const PlanInputs& in, TaskRecord& record, PodView failure) {
  failure.message = Bounded(failure.message);
  record.event = ClassifyFailure(in.spec.failure_policy, failure) == FailureClass::kFatal
                     ? TaskEvent::kFatal
                     : TaskEvent::kFailed;
  record.failure = std::move(failure);
}

bool RanBefore(const PlanInputs& in, const TaskStatus& task) {
  // Its pod as the operator named it, or a spare pod that took it over (spares.h).
  return (task.pod == TaskPodName(JobName(in), task.index, task.incarnation) ||
          (!task.spare_of.empty() && task.pod == task.spare_of)) &&
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
  // Kept only while the coordinator's report still waits on the pod (below).
  const std::optional<absl::Time> reported_at = std::exchange(task.failure_reported_at, {});
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
  } else if (failed) {
    PodView failure = pod;
    // The pod's own words first; the coordinator's when the pod has none.
    if (failure.message.empty() && coordinator_says_failed) {
      failure.message = reported->second.reason;
    }
    Fail(in, record, std::move(failure));
  } else if (const WaitingVerdict waiting = JudgeWaiting(pod, in.now); waiting.failed) {
    Fail(in, record, WaitingFailure(pod));
  } else if (coordinator_says_failed) {
    // The coordinator saw the task crash, hang, lose its session or report an error. Its report
    // usually arrives before the pod's terminal status (the kubelet's update lags about a
    // second), and only the pod's status has the exit code and reason (OOMKilled, ...) the
    // failure policy classifies by: wait for it, briefly. A hung process never exits, so past
    // the bound the task fails as the coordinator said (its pod is then deleted).
    const absl::Time since = reported_at.value_or(in.now);
    const absl::Duration wait = ExitStatusWait(in.spec.nproc_per_node);
    if (in.now < since + wait) {
      task.failure_reported_at = since;
      task.state = TaskState::kAwaitingExit;
      record.recheck_at = since + wait;
      return;
    }
    task.failure_reported_at = since;  // the bound stays passed during a back-off
    PodView failure = pod;
    failure.reason = "CoordinatorDeclaredFailed";
    failure.message = reported->second.reason;
    Fail(in, record, std::move(failure));
  } else {
    task.state = pod.phase == PodPhase::kRunning ? TaskState::kRunning : TaskState::kPending;
    record.recheck_at = waiting.fails_at;
  }
}

Next ClassifyTasks(const PlanInputs& in, JobPass& pass) {
  for (TaskRecord& record : pass.tasks) {
    const bool was_preempting = record.status.preempting_since.has_value();
    ClassifyTask(in, record);
    if (!was_preempting && record.status.preempting_since.has_value()) {
      // A disrupted pod already being deleted (the scheduler preempting it, an eviction): its
      // checkpoint clock started here, not in the preemption stage; say so there as here.
      pass.out.events.push_back(
          {false, "PreemptionNotice",
           absl::StrCat(DescribeDisruption(record.status.index, *record.pod),
                        "; asking its coordinator for a coordinated checkpoint before it goes")});
    }
    if (record.recheck_at != absl::InfiniteFuture()) {
      RequeueWithin(pass, std::max(record.recheck_at - in.now, absl::ZeroDuration()));
    }
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
