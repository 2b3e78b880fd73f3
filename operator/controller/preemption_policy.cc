#include "operator/controller/preemption_policy.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/kube/object_meta.h"
#include "operator/controller/move_budget.h"

namespace phalanx::op {
namespace {

// Starts the task's checkpoint clock (once) and says so.
void Notice(const PlanInputs& in, JobPass& pass, TaskRecord& record) {
  TaskStatus& task = record.status;
  if (task.preempting_since.has_value()) return;
  task.preempting_since = in.now;
  const absl::Time deadline = CheckpointDeadline(record, in.spec.preemption);
  const std::string what =
      record.preemption_reason == "DisruptionTarget"
          ? DescribeDisruption(task.index, *record.pod)
          : absl::StrCat("task ", task.index, " on node ", record.pod->node, " is being preempted");
  pass.out.events.push_back(
      {false, "PreemptionNotice",
       absl::StrCat(what, "; asking its coordinator for a coordinated checkpoint, deadline ",
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
    // Counted as the failures stage counts: one restart per pass, however many tasks move.
    if (st.restarts >= policy.max_restarts) {
      FailJob(in, pass, "MaxRestartsExceeded",
              absl::StrCat("task ", moved.front(), " was preempted; the job was already restarted ",
                           st.restarts, st.restarts == 1 ? " time" : " times", " (maxRestarts ",
                           policy.max_restarts, ") and preemptions count toward it"));
      return false;
    }
    ++st.restarts;
  }
  st.last_restart_time = in.now;
  st.productive_at_last_restart = st.productive_seconds;
  for (int i : moved) RecordMove(pass.tasks[static_cast<size_t>(i)].status, in.now);
  for (int i : moved) {
    const TaskRecord& record = pass.tasks[static_cast<size_t>(i)];
    // Its node going away, or the pod itself taken (the scheduler's preemption, an eviction).
    const std::string from =
        record.preemption_reason == "NodePreempted" || record.preemption_reason.empty()
            ? "its preempted node"
            : absl::StrCat("its preemption (", record.preemption_reason, ")");
    pass.out.events.push_back({true, "TaskPreempted",
                               absl::StrCat("task ", i, " moved off ", from, " as incarnation ",
                                            NextIncarnation(in, i, record.status.incarnation))});
  }
  if (policy.restart_scope == RestartScope::kJob) {
    RestartAll(in, pass, "Preempted", moved);
  } else {
    for (int i : moved) RestartTask(in, pass, i, "Preempted", std::nullopt);
  }
  return true;
}

// Keeps `record` where it is (Preempting) until the move budget allows the move; a Warning Event
// when a hold starts (or its end moves), not on every pass of it.
void Hold(const PlanInputs& in, JobPass& pass, TaskRecord& record, absl::Time until) {
  TaskStatus& task = record.status;
  task.state = TaskState::kPreempting;
  if (task.move_held_until != until) {
    pass.out.events.push_back({
        true,
        "MoveLimitReached",
        absl::StrCat("task ", task.index, " was moved off a preemption ", kMaxMovesPerWindow,
                     " times within ", absl::FormatDuration(kMoveWindow), " (the most allowed); ",
                     "its next move waits until ", kube::FormatKubeTime(until)),
    });
  }
  task.move_held_until = until;
  RequeueWithin(pass, until - in.now);
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
  std::vector<int> allowed;
  for (TaskRecord& record : pass.tasks) {
    TaskStatus& task = record.status;
    ForgetOldMoves(task, in.now);
    std::optional<absl::Time> until = MoveHeldUntil(task, in.now);
    if (std::find(moved.begin(), moved.end(), task.index) == moved.end()) {
      // Not moving this pass. A hold is kept until it ends even so: a node that flaps gets
      // one MoveLimitReached Event per hold, not one per flap.
      if (task.move_held_until.has_value() && *task.move_held_until <= in.now) {
        task.move_held_until.reset();
      }
    } else if (until.has_value()) {
      Hold(in, pass, record, *until);
    } else {
      allowed.push_back(task.index);
    }
  }
  moved = std::move(allowed);
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
