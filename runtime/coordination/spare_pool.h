// SparePool: the job's spare processes (spec.spares, ADR 0007) waiting to be given a task, and
// the take-overs made. A spare is a process that did everything before phalanx.init() (imports,
// building its model) and then waits here; when a task fails, the service hands the failed task's
// next incarnation to the spare that has waited longest, so the task is back in the time the
// spare takes to register instead of a new pod's scheduling, start and imports.
//
//                Await(pod)                       TakeOver(task, incarnation)
//   (none) ────────────────────▶ waiting ─────────────────────────────────────▶ assigned
//     ▲                            │  ▲                        (answered with it, or at its
//     │                   deadline │  │ Await again                     next Await at once)
//     │                   passed:  ▼  │ (keeps its place)
//     └── no Await within ── answered "not yet", still waiting
//         kRewaitGrace
//
// A spare between two polls still counts as waiting (and may be given a task then): a poll's
// end is no news, so it changes nothing the operator sees.
// A pod that was assigned and asks again (its answer was lost) gets the same assignment at once.
// A take-over whose spare does not register in time (it died while it waited: a long poll does
// not notice that before its deadline) is handed on: Unclaimed names it, and the service gives
// the task's next incarnation to the next spare.
// Each change (a spare starts or stops waiting, a take-over) bumps the job's version, so the
// operator's watch sees the spares and the pod that took over a task (it relabels that pod).
//
// Answers go through Completions: never under the service's lock. Not thread-safe: the service
// owns it under its lock.
#pragma once

#include <cstddef>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/base/incarnation.h"
#include "runtime/coordination/completions.h"
#include "runtime/coordination/types.h"

namespace phalanx::coord {

struct SpareAssignment {
  int task_id = 0;
  base::Incarnation incarnation = 0;
  friend bool operator==(const SpareAssignment&, const SpareAssignment&) = default;
};

// What a spare's wait ends with: its assignment, nullopt when the wait ended without one (call
// again), or an error (the service is stopping).
using SpareAnswer = absl::AnyInvocable<void(absl::StatusOr<std::optional<SpareAssignment>>) &&>;

class SparePool {
 public:
  struct Limits {
    // Spares waiting at once (spec.spares is at most the job's task count; a bound on what any
    // holder of spare credentials can make the coordinator hold).
    size_t max_waiting = 1024;
    // Take-overs remembered (the oldest are forgotten; by then the operator relabelled them).
    size_t max_assignments = 1024;
  };
  explicit SparePool(Limits limits) : limits_(limits) {}
  static constexpr absl::Duration kRewaitGrace = absl::Seconds(5);

  // `pod` (in `slot`) waits until `deadline` for a task. Already assigned: answered at once with
  // it. Another wait of the same pod is answered "not yet" (it is superseded). Returns whether
  // the pool changed (the version must be bumped). ResourceExhausted (answered) when
  // max_waiting spares already wait.
  bool Await(const std::string& pod, int slot, absl::Time now, absl::Time deadline,
             SpareAnswer done, Completions& out);
  // Gives `task` at `incarnation` to the spare that has waited longest; its wait is answered.
  // Returns the spare's pod name, or nullopt when no spare waits.
  std::optional<std::string> TakeOver(int task, base::Incarnation incarnation, absl::Time now,
                                      Completions& out);
  // `task` registered `incarnation`: a take-over of it is claimed.
  void Registered(int task, base::Incarnation incarnation);
  // The take-overs made at or before `assigned_by` that nobody claimed; each is named once.
  std::vector<SpareInfo> Unclaimed(absl::Time assigned_by);
  // Answers "not yet" to every wait whose deadline is at or before `now` (the spare stays,
  // for kRewaitGrace); forgets the spares that did not wait again within it. Returns whether
  // any was forgotten.
  bool Expire(absl::Time now, Completions& out);
  // Answers every wait with `why` (the service stops).
  void FailAll(const absl::Status& why, Completions& out);

  size_t waiting_count() const { return waiting_.size(); }
  // Waiting spares (oldest first), then the take-overs remembered (oldest first).
  std::vector<SpareInfo> Infos() const;

 private:
  struct Waiter {
    std::string pod;
    int slot = 0;
    absl::Time since;
    absl::Time deadline;  // of the poll in progress; without one, until it is forgotten
    SpareAnswer done;     // null between two polls
  };
  struct Assigned {
    SpareInfo info;
    bool claimed = false;  // registered, or named by Unclaimed
  };
  const Limits limits_;
  std::deque<Waiter> waiting_;     // oldest first
  std::deque<Assigned> assigned_;  // oldest first
};

}  // namespace phalanx::coord
