#include "runtime/coordination/alive_tasks.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "runtime/coordination/error_details.h"

namespace phalanx::coord {

void AliveTasksAgreement::Join(TaskRef caller, const std::vector<int>& set, absl::Time deadline,
                               AliveTasksCallback done, const AliveFn& alive, Completions& out) {
  Round& round = rounds_[set];
  if (auto it = round.find(caller.task_id); it != round.end()) {
    out.Add([old = std::move(it->second.done)]() mutable {
      std::move(old)(absl::CancelledError("superseded by a newer call of the same task"));
    });
  }
  round[caller.task_id] = Caller{caller.incarnation, deadline, std::move(done)};
  if (TryComplete(set, round, alive, out)) rounds_.erase(set);
}

bool AliveTasksAgreement::TryComplete(const std::vector<int>& set, Round& round,
                                      const AliveFn& alive, Completions& out) {
  std::vector<TaskRef> answer;
  for (int task : set) {
    std::optional<base::Incarnation> incarnation = alive(task);
    if (!incarnation.has_value()) continue;
    auto it = round.find(task);
    if (it == round.end() || it->second.incarnation != *incarnation) return false;
    answer.push_back(TaskRef{task, *incarnation});
  }
  if (round.empty()) return true;
  for (auto& [task, caller] : round) {
    out.Answer(std::move(caller.done), answer);
  }
  return true;
}

void AliveTasksAgreement::Reevaluate(const AliveFn& alive, Completions& out) {
  for (auto it = rounds_.begin(); it != rounds_.end();) {
    if (TryComplete(it->first, it->second, alive, out)) {
      it = rounds_.erase(it);
    } else {
      ++it;
    }
  }
}

void AliveTasksAgreement::DropTask(TaskRef gone, const absl::Status& why, Completions& out) {
  for (auto& [set, round] : rounds_) {
    auto it = round.find(gone.task_id);
    if (it == round.end() || it->second.incarnation != gone.incarnation) continue;
    out.Answer(std::move(it->second.done), why);
    round.erase(it);
  }
}

void AliveTasksAgreement::Expire(absl::Time now, Completions& out) {
  for (auto& [set, round] : rounds_) {
    for (auto it = round.begin(); it != round.end();) {
      if (it->second.deadline > now) {
        ++it;
        continue;
      }
      std::vector<int> missing;
      pb::ErrorDetails details;
      details.set_reason(pb::ErrorDetails::ALIVE_TASKS_TIMED_OUT);
      for (int task : set) {
        if (round.contains(task)) continue;
        missing.push_back(task);
        details.add_missing_task_ids(task);
      }
      out.Add([done = std::move(it->second.done), missing, details]() mutable {
        std::move(done)(WithDetails(
            absl::DeadlineExceededError(absl::StrCat(
                "GetAliveTasks timed out; tasks that did not ask: ", absl::StrJoin(missing, ", "))),
            details));
      });
      it = round.erase(it);
    }
  }
  std::erase_if(rounds_, [](const auto& entry) { return entry.second.empty(); });
}

void AliveTasksAgreement::FailAll(const absl::Status& why, Completions& out) {
  for (auto& [set, round] : rounds_) {
    for (auto& [task, caller] : round) {
      out.Answer(std::move(caller.done), why);
    }
  }
  rounds_.clear();
}

}  // namespace phalanx::coord
