#include "runtime/coordination/task_table.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace phalanx::coord {

TaskTable::TaskTable(int num_tasks, absl::Time now) : tasks_(num_tasks) {
  counts_[static_cast<size_t>(TaskState::kUnregistered)] = num_tasks;
  for (int i = 0; i < num_tasks; ++i) {
    tasks_[i].info.task_id = i;
    tasks_[i].info.changed = now;
  }
}

absl::Status TaskTable::CheckId(int task_id) const {
  if (task_id >= 0 && task_id < size()) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("task id ", task_id, " is out of range [0, ", size(), ")"));
}

absl::StatusOr<TaskTable::Admission> TaskTable::Admit(TaskRef ref) const {
  if (absl::Status s = CheckId(ref.task_id); !s.ok()) return s;
  if (ref.incarnation < 0) {
    // Only a value above 2^63 - 1 on the wire becomes this (base::IncarnationFromWire).
    return absl::InvalidArgumentError(
        absl::StrCat("task ", ref.task_id, " names no valid incarnation (above 2^63 - 1)"));
  }
  const TaskInfo& info = tasks_[ref.task_id].info;
  const bool known = info.state != TaskState::kUnregistered;
  // An incarnation far beyond the newest seen is a forged or corrupt one, never a restart
  // (each restart adds one): accepting it would leave the task id unusable for every real
  // incarnation below it.
  const base::Incarnation newest = known ? info.incarnation : 0;
  if (ref.incarnation - newest > kMaxIncarnationStep) {
    return absl::InvalidArgumentError(
        absl::StrCat("task ", ref.task_id, " incarnation ", ref.incarnation,
                     " is implausibly far ahead of incarnation ", newest, " (at most ",
                     kMaxIncarnationStep, " more is accepted)"));
  }
  if (!known) return Admission::kFirst;
  if (ref.incarnation < info.incarnation) {
    return absl::AbortedError(absl::StrCat("task ", ref.task_id, " incarnation ", ref.incarnation,
                                           " is stale: incarnation ", info.incarnation,
                                           " has registered since"));
  }
  if (ref.incarnation > info.incarnation) return Admission::kReplace;
  if (info.state == TaskState::kFailed) {
    return absl::AbortedError(absl::StrCat("task ", ref.task_id, " incarnation ", ref.incarnation,
                                           " was declared failed (", info.reason,
                                           "); restart it with a new incarnation"));
  }
  if (info.state == TaskState::kShutdown) {
    return absl::AbortedError(absl::StrCat("task ", ref.task_id, " has shut down"));
  }
  return Admission::kRetry;
}

absl::Status TaskTable::CheckCaller(TaskRef ref) const {
  if (absl::Status s = CheckId(ref.task_id); !s.ok()) return s;
  const TaskInfo& info = tasks_[ref.task_id].info;
  if (info.state == TaskState::kUnregistered) {
    return absl::FailedPreconditionError(absl::StrCat("task ", ref.task_id, " is not registered"));
  }
  if (ref.incarnation < info.incarnation) {
    return absl::AbortedError(absl::StrCat("task ", ref.task_id, " restarted: incarnation ",
                                           ref.incarnation, " superseded by ", info.incarnation));
  }
  if (ref.incarnation > info.incarnation) {
    return absl::FailedPreconditionError(
        absl::StrCat("task ", ref.task_id, " incarnation ", ref.incarnation, " is not registered"));
  }
  if (info.state == TaskState::kFailed) {
    return absl::AbortedError(absl::StrCat("task ", ref.task_id, " incarnation ", ref.incarnation,
                                           " was declared failed: ", info.reason));
  }
  if (info.state == TaskState::kShutdown) {
    return absl::FailedPreconditionError(absl::StrCat("task ", ref.task_id, " has shut down"));
  }
  return absl::OkStatus();
}

std::optional<base::Incarnation> TaskTable::AliveIncarnation(int task_id) const {
  if (task_id < 0 || task_id >= size()) return std::nullopt;
  const TaskInfo& info = tasks_[task_id].info;
  if (info.state != TaskState::kConnected) return std::nullopt;
  return info.incarnation;
}

absl::StatusOr<Participants> TaskTable::ResolveSubset(std::vector<int> tasks, int caller) const {
  if (tasks.empty()) return All();
  std::sort(tasks.begin(), tasks.end());
  if (std::adjacent_find(tasks.begin(), tasks.end()) != tasks.end()) {
    return absl::InvalidArgumentError("task subset lists a task twice");
  }
  if (tasks.front() < 0 || tasks.back() >= size()) {
    return absl::InvalidArgumentError("task subset names a task id out of range");
  }
  if (!std::binary_search(tasks.begin(), tasks.end(), caller)) {
    return absl::InvalidArgumentError(
        absl::StrCat("task subset does not include the calling task ", caller));
  }
  // Every id listed (sorted, unique, in range) is the same barrier as none listed.
  if (static_cast<int>(tasks.size()) == size()) return All();
  return Participants::Listed(std::move(tasks));
}

std::shared_ptr<SessionOutbox> TaskTable::Attach(Task& task, std::shared_ptr<SessionOutbox> outbox,
                                                 absl::Time now, uint64_t* id) {
  std::shared_ptr<SessionOutbox> replaced = Detach(task);
  *id = next_session_id_++;
  task.session_id = *id;
  task.outbox = std::move(outbox);
  task.last_seen = now;
  session_task_[*id] = task.info.task_id;
  return replaced;
}

TaskTable::Task* TaskTable::FindSession(uint64_t session_id) {
  auto it = session_task_.find(session_id);
  return it == session_task_.end() ? nullptr : &tasks_[it->second];
}

std::shared_ptr<SessionOutbox> TaskTable::Detach(Task& task) {
  if (task.outbox == nullptr) return nullptr;
  session_task_.erase(task.session_id);
  task.session_id = 0;
  return std::move(task.outbox);
}

void TaskTable::SetState(Task& task, TaskState state) {
  --counts_[static_cast<size_t>(task.info.state)];
  ++counts_[static_cast<size_t>(state)];
  task.info.state = state;
  if (state == TaskState::kFailed) {
    failed_.insert(task.info.task_id);
  } else {
    failed_.erase(task.info.task_id);
  }
}

std::vector<TaskInfo> TaskTable::Infos() const {
  std::vector<TaskInfo> infos;
  infos.reserve(tasks_.size());
  for (const Task& task : tasks_) {
    infos.push_back(task.info);
    if (task.info.state != TaskState::kUnregistered) infos.back().last_heard = task.last_seen;
  }
  return infos;
}

std::string TaskTable::Describe(int task_id) const {
  const TaskInfo& info = tasks_[task_id].info;
  if (info.state == TaskState::kConnected) return absl::StrCat(task_id);
  return absl::StrCat(task_id, " (", TaskStateName(info.state), info.reason.empty() ? "" : ": ",
                      info.reason, ")");
}

}  // namespace phalanx::coord
