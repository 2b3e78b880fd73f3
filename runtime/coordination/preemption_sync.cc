#include "runtime/coordination/preemption_sync.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace phalanx::coord {

std::pair<PreemptionRound, bool> PreemptionSync::Notify(const PreemptionNotice& notice) {
  // A notice joins a round still collecting steps; once a round agreed on its step, a new
  // notice (another node, a later event) needs a checkpoint of its own: a new round.
  if (round_.has_value() && !round_->sync_step.has_value()) {
    PreemptionRound& info = round_->info;
    info.deadline = std::min(info.deadline, notice.deadline);
    for (int task : notice.affected_tasks) {
      if (std::find(info.affected_tasks.begin(), info.affected_tasks.end(), task) ==
          info.affected_tasks.end()) {
        info.affected_tasks.push_back(task);
      }
    }
    return {info, true};
  }
  round_.emplace();
  round_->info =
      PreemptionRound{next_round_++, notice.deadline, notice.reason, notice.affected_tasks};
  return {round_->info, false};
}

std::optional<PreemptionRound> PreemptionSync::Active() const {
  if (!round_.has_value()) return std::nullopt;
  return round_->info;
}

void PreemptionSync::Superseded(int task) {
  if (!round_.has_value()) return;
  std::erase(round_->info.affected_tasks, task);
}

void PreemptionSync::Report(TaskRef task, uint64_t round, int64_t step, SyncStepCallback done,
                            const AliveFn& alive, Completions& out) {
  if (!round_.has_value() || round_->info.round != round) {
    out.Add([done = std::move(done), round]() mutable {
      std::move(done)(
          absl::FailedPreconditionError(absl::StrCat("preemption round ", round, " is not open")));
    });
    return;
  }
  if (round_->sync_step.has_value()) {
    out.Add(
        [done = std::move(done), sync = *round_->sync_step]() mutable { std::move(done)(sync); });
    return;
  }
  auto [it, fresh] = round_->reports.try_emplace(task.task_id);
  if (!fresh && it->second.done.has_value()) {
    out.Add([old = std::move(*it->second.done)]() mutable {
      std::move(old)(absl::CancelledError("superseded by a newer report of the same task"));
    });
  }
  it->second = Report_{task.incarnation, step, std::move(done)};
  TryAgree(alive, out);
}

void PreemptionSync::TryAgree(const AliveFn& alive, Completions& out) {
  if (!round_.has_value() || round_->sync_step.has_value() || round_->reports.empty()) return;
  // Every alive task must have reported with its current incarnation.
  int64_t sync_step = 0;
  for (int task = 0; task < num_tasks_; ++task) {
    std::optional<base::Incarnation> incarnation = alive(task);
    if (!incarnation.has_value()) continue;
    auto it = round_->reports.find(task);
    if (it == round_->reports.end() || it->second.incarnation != *incarnation) return;
    sync_step = std::max(sync_step, it->second.step);
  }
  round_->sync_step = sync_step;
  for (auto& [task, report] : round_->reports) {
    if (!report.done.has_value()) continue;
    out.Answer(std::move(*report.done), sync_step);
    report.done.reset();
  }
}

void PreemptionSync::Reevaluate(const AliveFn& alive, Completions& out) { TryAgree(alive, out); }

void PreemptionSync::DropTask(TaskRef gone, const absl::Status& why, Completions& out) {
  if (!round_.has_value()) return;
  auto it = round_->reports.find(gone.task_id);
  if (it == round_->reports.end() || it->second.incarnation != gone.incarnation) return;
  if (it->second.done.has_value()) {
    out.Answer(std::move(*it->second.done), why);
  }
  round_->reports.erase(it);
}

void PreemptionSync::Expire(absl::Time now, const AliveFn& alive, Completions& out) {
  if (!round_.has_value() || round_->info.deadline > now) return;
  std::vector<int> missing;
  for (int task = 0; task < num_tasks_; ++task) {
    if (alive(task).has_value() && !round_->reports.contains(task)) missing.push_back(task);
  }
  const absl::Status late = absl::DeadlineExceededError(
      absl::StrCat("preemption round ", round_->info.round,
                   " reached its deadline; tasks that never reported a step: ",
                   missing.empty() ? "none" : absl::StrJoin(missing, ", ")));
  for (auto& [task, report] : round_->reports) {
    if (!report.done.has_value()) continue;
    out.Answer(std::move(*report.done), late);
  }
  round_.reset();
}

void PreemptionSync::FailAll(const absl::Status& why, Completions& out) {
  if (!round_.has_value()) return;
  for (auto& [task, report] : round_->reports) {
    if (!report.done.has_value()) continue;
    out.Answer(std::move(*report.done), why);
  }
  round_.reset();
}

}  // namespace phalanx::coord
