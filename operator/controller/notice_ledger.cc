#include "operator/controller/notice_ledger.h"

#include <algorithm>
#include <iterator>

namespace phalanx::op {

NoticeLedger::Due NoticeLedger::DueFor(const std::string& key, const std::string& coordinator,
                                       int nproc_per_node,
                                       const std::vector<PreemptionNotice>& notices) {
  std::set<std::pair<int, absl::Time>> open;
  for (const PreemptionNotice& n : notices) open.insert({n.task, n.since});
  Due due;
  absl::MutexLock lock(&mu_);
  Delivered& record = jobs_[key];
  if (record.coordinator != coordinator) {
    // A new coordinator pod (or none running) knows nothing of the rounds its predecessor
    // acknowledged: every open notice goes out again once one runs.
    record.coordinator = coordinator;
    record.acked.clear();
  }
  for (auto it = record.acked.begin(); it != record.acked.end();) {
    it = open.contains(*it) ? std::next(it) : record.acked.erase(it);
  }
  for (const PreemptionNotice& n : notices) {
    if (record.acked.contains({n.task, n.since})) continue;
    for (int t = n.task * nproc_per_node; t < (n.task + 1) * nproc_per_node; ++t) {
      due.tasks.push_back(t);
    }
    due.deadline = std::min(due.deadline, n.deadline);
  }
  return due;
}

void NoticeLedger::Acknowledge(const std::string& key, const std::string& coordinator,
                               const std::vector<PreemptionNotice>& notices) {
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(key);
  if (it == jobs_.end() || it->second.coordinator != coordinator) return;  // the next pass
  for (const PreemptionNotice& n : notices) it->second.acked.insert({n.task, n.since});
}

void NoticeLedger::Forget(const std::string& key) {
  absl::MutexLock lock(&mu_);
  jobs_.erase(key);
}

}  // namespace phalanx::op
