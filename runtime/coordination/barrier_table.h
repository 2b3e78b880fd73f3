// BarrierTable: named, incarnation-aware barriers with deadlines and optional task subsets.
//
// Not thread-safe: CoordinationService calls it with its lock held; completions are collected
// into `Completions` and run after the lock is released.
//
//              first arrival                 every participant arrived
//   (absent) ───────────────▶ PENDING ───────────────────────────────▶ PASSED
//                               │  │ deadline passed                     (arrivals later: OK)
//                               │  ├───────────────▶ TIMED_OUT (DeadlineExceeded, names missing)
//                               │  └─ a participant ▶ PEER_FAILED (Cancelled, names the task)
//                               │     failed
//                               └─ CancelBarrier ──▶ CANCELLED (Cancelled, names who cancelled)
//
// Ids are single use: a finished barrier answers every later arrival with its result (so a
// restarted task re-running a passed step does not block, and retries are idempotent). Only the
// most recent results are kept, at most `max_finished` of them holding at most
// `max_finished_bytes` of ids and messages (a timeout's message names every missing task), so
// the memory is bounded however many barriers a job runs. The consequence: an arrival at a
// barrier forgotten since (thousands of barriers later) starts it afresh and waits for the
// others until its timeout, ending DeadlineExceeded, instead of getting the old result.
// An arrival belongs to one incarnation: when that incarnation dies (DropTask) its own wait ends
// with the reason. Fail fast: the barrier fails for every other waiter at once as well
// (FailParticipant), and an arrival at a barrier one of whose participants is failed right now
// fails it (FailNow), so a plain training loop goes straight to recovery instead of waiting out
// the timeout (XLA's coordination service does the same). Only news fails fast: the service calls
// FailNow for a failure that came after the arriving incarnation registered; one from before (a
// whole-job restart) makes the arrival wait for the failed peer's next incarnation. The service's
// own barriers (ids that start with a space: the shutdown barrier) are exempt; they wait for the
// restarted task.
#pragma once

#include <deque>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/base/incarnation.h"
#include "runtime/coordination/completions.h"
#include "runtime/coordination/metrics.h"
#include "runtime/coordination/participants.h"
#include "runtime/coordination/types.h"

namespace phalanx::coord {

class BarrierTable {
 public:
  // Each limit names the coordinator flag that sets it.
  struct Limits {
    size_t max_id_bytes = 512;             // --barrier_max_id_bytes
    size_t max_pending = 1024;             // --barrier_max_pending: barriers waiting at once
    size_t max_waiting = 65'536;           // --barrier_max_waiting: arrivals waiting, all barriers
    size_t max_finished = 10'000;          // --barrier_max_finished
    size_t max_finished_bytes = 16 << 20;  // --barrier_max_finished_bytes
  };
  // Says why a task has not arrived, for straggler reports (e.g. "failed: session broken").
  using DescribeTask = std::function<std::string(int task_id)>;

  BarrierTable(CoordinatorMetrics& metrics, Limits limits) : metrics_(metrics), limits_(limits) {}

  // InvalidArgument for an empty id or one over max_id_bytes.
  absl::Status ValidateId(const std::string& id) const;

  // `participants` is non-empty and contains `task` (the service checks).
  // Returns InvalidArgument (via `done`) if the barrier exists with other participants, and
  // ResourceExhausted if it would be a new one past max_pending or a waiting arrival past
  // max_waiting (the service's own barriers, ids starting with a space, are exempt).
  void Arrive(TaskRef task, const std::string& id, Participants participants, absl::Time deadline,
              absl::Time now, StatusCallback done, Completions& out);
  // Fails a pending barrier for every waiter. NotFound if no such pending barrier.
  absl::Status Cancel(TaskRef by, const std::string& id, Completions& out);
  // The incarnation `gone` is dead: its arrivals stop counting, its waits fail with `why`.
  void DropTask(TaskRef gone, const absl::Status& why, Completions& out);
  // Task `task_id`'s current incarnation failed: every pending barrier it takes part in (except
  // the service's own) fails for all its waiters with `why`, prefixed with the barrier's id.
  void FailParticipant(int task_id, const absl::Status& why, absl::Time now, Completions& out);
  // `task` arrived at `id` while a participant is failed (`why` names it): the barrier fails
  // for everyone now, unless it has finished already (then `done` gets that result).
  void FailNow(const std::string& id, const absl::Status& why, absl::Time now, StatusCallback done,
               Completions& out);
  void Expire(absl::Time now, const DescribeTask& describe, Completions& out);
  void FailAll(const absl::Status& why, Completions& out);
  // Drops the remembered result of `id` if it failed, so the id can be used again (the
  // shutdown barrier, which a job may retry after a timeout).
  void ForgetFailure(const std::string& id);

  size_t pending_count() const { return pending_.size(); }
  size_t finished_count() const { return finished_.size(); }
  // Bytes of ids and messages held for finished barriers.
  size_t finished_bytes() const { return finished_bytes_; }

 private:
  struct Arrival {
    base::Incarnation incarnation;
    absl::Time arrived;
    StatusCallback done;
  };
  struct Pending {
    Participants participants;
    absl::Time deadline;
    std::map<int, Arrival> arrivals;
  };

  void Finish(const std::string& id, Pending& barrier, const absl::Status& result, absl::Time now,
              Completions& out);
  void Remember(const std::string& id, absl::Status result);
  void EraseFinished(const std::string& id);

  CoordinatorMetrics& metrics_;
  const Limits limits_;
  std::map<std::string, Pending> pending_;
  struct Finished {
    absl::Status result;
    uint64_t seq;  // which Remember() stored it, to match finished_order_
  };
  absl::flat_hash_map<std::string, Finished> finished_;
  // Oldest first. May name results erased since (ForgetFailure) or stored again under the same
  // id; an entry evicts only the result with its sequence number.
  std::deque<std::pair<std::string, uint64_t>> finished_order_;
  uint64_t next_seq_ = 0;
  size_t finished_bytes_ = 0;
  size_t waiting_ = 0;  // arrivals in pending_, all barriers
};

}  // namespace phalanx::coord
