// BarrierTable: named, incarnation-aware barriers with deadlines and optional task subsets.
//
// Not thread-safe: CoordinationService calls it with its lock held; completions are collected
// into `Completions` and run after the lock is released.
//
//              first arrival                 every participant arrived
//   (absent) ───────────────▶ PENDING ───────────────────────────────▶ PASSED
//                               │  │ deadline passed                     (arrivals later: OK)
//                               │  └───────────────▶ TIMED_OUT (DeadlineExceeded, names missing)
//                               └─ CancelBarrier ──▶ CANCELLED (Cancelled, names who cancelled)
//
// Ids are single use: a finished barrier answers every later arrival with its result (so a
// restarted task re-running a passed step does not block, and retries are idempotent). Results
// of the most recent kMaxFinished barriers are kept.
// An arrival belongs to one incarnation: when that incarnation dies (DropTask) the arrival is
// removed and no longer counts; the restarted task must arrive again.
#pragma once

#include <deque>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "runtime/coordination/completions.h"
#include "runtime/coordination/metrics.h"
#include "runtime/coordination/types.h"

namespace phalanx::coord {

class BarrierTable {
 public:
  static constexpr size_t kMaxFinished = 10000;
  // Says why a task has not arrived, for straggler reports (e.g. "failed: session broken").
  using DescribeTask = std::function<std::string(int task_id)>;

  explicit BarrierTable(CoordinatorMetrics& metrics) : metrics_(metrics) {}

  // `participants` is sorted, unique, non-empty and contains `task` (the service checks).
  // Returns InvalidArgument (via `done`) if the barrier exists with other participants.
  void Arrive(TaskRef task, const std::string& id, std::vector<int> participants,
              absl::Time deadline, absl::Time now, StatusCallback done, Completions& out);
  // Fails a pending barrier for every waiter. NotFound if no such pending barrier.
  absl::Status Cancel(TaskRef by, const std::string& id, Completions& out);
  // The incarnation `gone` is dead: its arrivals stop counting, its waits fail with `why`.
  void DropTask(TaskRef gone, const absl::Status& why, Completions& out);
  void Expire(absl::Time now, const DescribeTask& describe, Completions& out);
  void FailAll(const absl::Status& why, Completions& out);
  // Drops the remembered result of `id` if it failed, so the id can be used again (the
  // shutdown barrier, which a job may retry after a timeout).
  void ForgetFailure(const std::string& id);

  size_t pending_count() const { return pending_.size(); }

 private:
  struct Arrival {
    uint64_t incarnation;
    absl::Time arrived;
    StatusCallback done;
  };
  struct Pending {
    std::vector<int> participants;
    absl::Time deadline;
    std::map<int, Arrival> arrivals;
  };

  void Finish(const std::string& id, Pending& barrier, const absl::Status& result, absl::Time now,
              Completions& out);
  void Remember(const std::string& id, absl::Status result);

  CoordinatorMetrics& metrics_;
  std::map<std::string, Pending> pending_;
  absl::flat_hash_map<std::string, absl::Status> finished_;
  std::deque<std::string> finished_order_;
};

}  // namespace phalanx::coord
