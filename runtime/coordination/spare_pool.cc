#include "runtime/coordination/spare_pool.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace phalanx::coord {

bool SparePool::Await(const std::string& pod, int slot, absl::Time now, absl::Time deadline,
                      SpareAnswer done, Completions& out) {
  for (const Assigned& assigned : assigned_) {
    const SpareInfo& a = assigned.info;
    if (a.pod != pod) continue;
    out.Answer(std::move(done),
               std::optional<SpareAssignment>(SpareAssignment{a.task_id, a.incarnation}));
    return false;
  }
  auto same =
      std::find_if(waiting_.begin(), waiting_.end(), [&](const Waiter& w) { return w.pod == pod; });
  if (same != waiting_.end()) {
    // The newer wait stands (an older call still open was given up by its client); the spare
    // keeps its place.
    if (same->done != nullptr) out.Answer(std::move(same->done), std::optional<SpareAssignment>());
    same->slot = slot;
    same->deadline = deadline;
    same->done = std::move(done);
    return false;
  }
  if (waiting_.size() >= limits_.max_waiting) {
    out.Answer(std::move(done),
               absl::StatusOr<std::optional<SpareAssignment>>(absl::ResourceExhaustedError(
                   absl::StrCat("spares: ", waiting_.size(), " already wait (the limit)"))));
    return false;
  }
  waiting_.push_back({pod, slot, now, deadline, std::move(done)});
  return true;
}

std::optional<std::string> SparePool::TakeOver(int task, base::Incarnation incarnation,
                                               absl::Time now, Completions& out) {
  if (waiting_.empty()) return std::nullopt;
  Waiter spare = std::move(waiting_.front());
  waiting_.pop_front();
  assigned_.push_back({{spare.pod, spare.slot, task, incarnation, now}});
  if (assigned_.size() > limits_.max_assignments) assigned_.pop_front();
  // Between two polls: its next Await is answered with this at once.
  if (spare.done != nullptr) {
    out.Answer(std::move(spare.done),
               std::optional<SpareAssignment>(SpareAssignment{task, incarnation}));
  }
  return spare.pod;
}

void SparePool::Registered(int task, base::Incarnation incarnation) {
  for (Assigned& a : assigned_) {
    if (a.info.task_id == task && a.info.incarnation == incarnation) a.claimed = true;
  }
}

std::vector<SpareInfo> SparePool::Unclaimed(absl::Time assigned_by) {
  std::vector<SpareInfo> unclaimed;
  for (Assigned& a : assigned_) {
    if (a.claimed || a.info.since > assigned_by) continue;
    a.claimed = true;
    unclaimed.push_back(a.info);
  }
  return unclaimed;
}

bool SparePool::Expire(absl::Time now, Completions& out) {
  bool forgotten = false;
  std::erase_if(waiting_, [&](Waiter& w) {
    if (w.deadline > now) return false;
    if (w.done != nullptr) {  // the poll ends; the spare has kRewaitGrace to poll again
      out.Answer(std::move(w.done), std::optional<SpareAssignment>());
      w.done = nullptr;
      w.deadline = now + kRewaitGrace;
      return false;
    }
    forgotten = true;
    return true;
  });
  return forgotten;
}

void SparePool::FailAll(const absl::Status& why, Completions& out) {
  for (Waiter& w : waiting_) {
    if (w.done == nullptr) continue;
    out.Answer(std::move(w.done), absl::StatusOr<std::optional<SpareAssignment>>(why));
  }
  waiting_.clear();
}

std::vector<SpareInfo> SparePool::Infos() const {
  std::vector<SpareInfo> infos;
  infos.reserve(waiting_.size() + assigned_.size());
  for (const Waiter& w : waiting_) infos.push_back({w.pod, w.slot, -1, 0, w.since});
  for (const Assigned& a : assigned_) infos.push_back(a.info);
  return infos;
}

}  // namespace phalanx::coord
