#include "operator/controller/preemption_policy.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/kube/object_meta.h"

namespace phalanx::op {
namespace {

// Starts the task's checkpoint clock (once) and says so.
void Notice(const PlanInputs& in, JobPass& pass, TaskRecord& record) {
  TaskStatus& task = record.status;
  if (task.preempting_since.has_value()) return;
  task.preempting_since = in.now;
  const absl::Time deadline = CheckpointDeadline(record, in.spec.preemption);
  pass.out.events.push_back(
      {false, "PreemptionNotice",
       absl::StrCat("task ", task.index, " on node ", record.pod->node,
                    " is being preempted; asking its coordinator for a coordinated checkpoint, "
                    "deadline ",
                    kube::FormatKubeTime(deadline), " (in ",
                    absl::FormatDuration(absl::Trunc(deadline - in.now, absl::Seconds(1))), ")")});
}

// Moves `moved` off their preemption; false when that exhausted maxRestarts (the job failed).
bool Move(const PlanInputs& in, JobPass& pass, const std::vector<int>& moved) {
  TrainingJobStatus& st = pass.out.status;
  const FailurePolicy& policy = in.spec.failure_policy;
  const int count = static_cast<int>(moved.size());
  st.preemptions += count;
  if (policy.preemptions_count_toward_max_restarts) {
    if (st.restarts + count > policy.max_restarts) {
      FailJob(in, pass, "MaxRestartsExceeded",
              absl::StrCat("task ", moved.front(), " was preempted; maxRestarts (",
                           policy.max_restarts, ") is exhausted and preemptions count toward it"));
      return false;
    }
    st.restarts += count;
  }
  st.last_restart_time = in.now;
  for (int i : moved) {
    pass.out.events.push_back(
        {true, "TaskPreempted",
         absl::StrCat("task ", i, " moved off its preempted node as incarnation ",
                      pass.tasks[static_cast<size_t>(i)].status.incarnation + 1)});
  }
  if (policy.restart_scope == RestartScope::kJob) {
    RestartAll(in, pass, "Preempted", moved);
  } else {
    for (int i : moved) RestartTask(in, pass, i, "Preempted", std::nullopt);
  }
  return true;
}

}  // namespace

absl::Time CheckpointDeadline(const TaskRecord& record, const PreemptionPolicy& policy) {
  return std::min(*record.status.preempting_since + policy.checkpoint_grace, record.node_deadline);
}

Next ApplyPreemptions(const PlanInputs& in, JobPass& pass) {
  std::vector<int> moved = TasksWith(pass, TaskEvent::kPreemptedAndGone);
  for (int i : TasksWith(pass, TaskEvent::kPreempted)) {
    TaskRecord& record = pass.tasks[static_cast<size_t>(i)];
    Notice(in, pass, record);
    const absl::Time deadline = CheckpointDeadline(record, in.spec.preemption);
    if (record.pod->phase == PodPhase::kFailed || in.now >= deadline) {
      moved.push_back(i);
    } else {
      record.status.state = TaskState::kPreempting;
      RequeueWithin(pass, deadline - in.now);
    }
  }
  if (moved.empty()) return Next::kContinue;
  pass.moved = moved;
  return Move(in, pass, moved) ? Next::kContinue : Next::kDone;
}

std::vector<PreemptionNotice> PreemptionNotices(const std::vector<TaskRecord>& tasks,
                                                const PreemptionPolicy& policy) {
  std::vector<PreemptionNotice> out;
  for (const TaskRecord& record : tasks) {
    const TaskStatus& task = record.status;
    if (!task.preempting_since.has_value() ||
        (task.state != TaskState::kPreempting && task.state != TaskState::kTerminating)) {
      continue;
    }
    out.push_back({task.index, *task.preempting_since, CheckpointDeadline(record, policy)});
  }
  return out;
}

}  // namespace phalanx::op
