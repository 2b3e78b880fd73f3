// JobStateWatchers: the WatchJobState long polls waiting for the job's state to change. Each is
// answered with the job's snapshot when the state changes (AnswerAll), when its own deadline
// passes (Expire) or when the service stops, never under the service's lock (Completions).
// Not thread-safe: the service owns it under its lock.
#pragma once

#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/time/time.h"
#include "runtime/coordination/completions.h"
#include "runtime/coordination/types.h"

namespace phalanx::coord {

class JobStateWatchers {
 public:
  void Add(absl::Time deadline, SnapshotCallback done) {
    watchers_.push_back({deadline, std::move(done)});
  }

  // Every watcher gets `snapshot()` (taken once, only when one waits).
  void AnswerAll(absl::FunctionRef<JobSnapshot()> snapshot, Completions& out) {
    if (watchers_.empty()) return;
    const JobSnapshot now = snapshot();
    for (Watcher& w : watchers_) out.Answer(std::move(w.done), now);
    watchers_.clear();
  }

  // The watchers whose deadline is at or before `now` get `snapshot()` (unchanged: it timed out).
  void Expire(absl::Time now, absl::FunctionRef<JobSnapshot()> snapshot, Completions& out) {
    std::vector<Watcher> due;
    std::erase_if(watchers_, [&](Watcher& w) {
      if (w.deadline > now) return false;
      due.push_back(std::move(w));
      return true;
    });
    if (due.empty()) return;
    const JobSnapshot current = snapshot();
    for (Watcher& w : due) out.Answer(std::move(w.done), current);
  }

 private:
  struct Watcher {
    absl::Time deadline;
    SnapshotCallback done;
  };
  std::vector<Watcher> watchers_;
};

}  // namespace phalanx::coord
