// NoticeLedger: which preemption notices each job's coordinator pod has acknowledged, so the
// reconciler delivers every open notice (preemption_policy.h PreemptionNotices) once per
// coordinator pod and again to a new one (a restarted coordinator has lost its rounds).
// Level-triggered: a delivery that failed is simply still due at the next pass. Memory is
// bounded: tasks no longer being preempted are forgotten (a later preemption is a new notice).
// Thread-safe (reconcile workers share it; one job is reconciled by one worker at a time).
#pragma once

#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "operator/controller/plan.h"

namespace phalanx::op {

class NoticeLedger {
 public:
  // What to deliver to coordinator pod `coordinator` (its UID; "" when none runs) for `notices`:
  // the tasks of every notice it has not acknowledged (a notice names a pod; the round names
  // its `nproc_per_node` tasks) and the earliest of their deadlines.
  struct Due {
    std::vector<int> tasks;
    absl::Time deadline = absl::InfiniteFuture();
  };
  Due DueFor(const std::string& key, const std::string& coordinator, int nproc_per_node,
             const std::vector<PreemptionNotice>& notices);
  // `coordinator` accepted the round DueFor(..., notices) named: every one of `notices` is
  // acknowledged (unless the job was forgotten or its coordinator changed meanwhile).
  void Acknowledge(const std::string& key, const std::string& coordinator,
                   const std::vector<PreemptionNotice>& notices);
  void Forget(const std::string& key);

 private:
  struct Delivered {
    std::string coordinator;                     // its UID
    std::set<std::pair<int, absl::Time>> acked;  // (task, preempting since)
  };
  absl::Mutex mu_;
  std::map<std::string, Delivered> jobs_ ABSL_GUARDED_BY(mu_);
};

}  // namespace phalanx::op
