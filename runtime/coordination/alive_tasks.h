// AliveTasksAgreement: GetAliveTasks(set) as a barrier-like agreement. Callers asking about the
// same set wait until every task of the set that is still alive has asked; then all of them get
// the same answer (the alive tasks, with incarnations). A task that dies while others wait is
// simply left out of the answer. Keyed by the (sorted) set, one round at a time.
//
// Not thread-safe: CoordinationService calls it with its lock held.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/base/incarnation.h"
#include "runtime/coordination/completions.h"
#include "runtime/coordination/types.h"

namespace phalanx::coord {

class AliveTasksAgreement {
 public:
  // The incarnation of `task_id` if it is alive (connected), else nullopt.
  using AliveFn = std::function<std::optional<base::Incarnation>(int task_id)>;

  // `set` is sorted and unique and contains the caller (the service checks).
  void Join(TaskRef caller, const std::vector<int>& set, absl::Time deadline,
            AliveTasksCallback done, const AliveFn& alive, Completions& out);
  // Re-checks every round after tasks changed state.
  void Reevaluate(const AliveFn& alive, Completions& out);
  void DropTask(TaskRef gone, const absl::Status& why, Completions& out);
  void Expire(absl::Time now, Completions& out);
  void FailAll(const absl::Status& why, Completions& out);

 private:
  struct Caller {
    base::Incarnation incarnation;
    absl::Time deadline;
    AliveTasksCallback done;
  };
  using Round = std::map<int, Caller>;

  // Completes the round if every alive member has joined; returns true if it did.
  bool TryComplete(const std::vector<int>& set, Round& round, const AliveFn& alive,
                   Completions& out);

  std::map<std::vector<int>, Round> rounds_;
};

}  // namespace phalanx::coord
