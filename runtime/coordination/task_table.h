// TaskTable: who speaks for each task id now (its incarnation and state), its session, when it
// was last heard, and the rules that admit a caller. Bookkeeping only: it sends nothing and ends
// no waits; CoordinationService (service.h, where the task state machine is drawn) acts on its
// answers: retiring an incarnation, telling peers, failing waits.
//
// Not thread-safe: the service owns it under its lock.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/base/incarnation.h"
#include "runtime/coordination/participants.h"
#include "runtime/coordination/session_outbox.h"
#include "runtime/coordination/types.h"

namespace phalanx::coord {

// The most an incarnation may be above the task's newest one (or above 0 for a task this
// coordinator has not seen): far more restarts than any job lives through.
inline constexpr base::Incarnation kMaxIncarnationStep = 1'000'000;

class TaskTable {
 public:
  struct Task {
    TaskInfo info;
    uint64_t session_id = 0;  // 0: no session
    std::shared_ptr<SessionOutbox> outbox;
    absl::Time last_seen;  // registration or last session message
    // The job-state version at which the task entered its current state: which of two changes
    // came first (a peer's failure before this task registered is not news to it).
    uint64_t state_version = 0;
  };

  // What a Register call means for its task (Admit).
  enum class Admission {
    kFirst,    // the task never registered
    kRetry,    // the current incarnation, connected already: nothing changes
    kReplace,  // a newer incarnation replaces the current one (connected, failed or shut down)
  };

  TaskTable(int num_tasks, absl::Time now);

  int size() const { return static_cast<int>(tasks_.size()); }
  Task& operator[](int task_id) { return tasks_[task_id]; }
  const Task& operator[](int task_id) const { return tasks_[task_id]; }
  std::vector<Task>::iterator begin() { return tasks_.begin(); }
  std::vector<Task>::iterator end() { return tasks_.end(); }
  std::vector<Task>::const_iterator begin() const { return tasks_.begin(); }
  std::vector<Task>::const_iterator end() const { return tasks_.end(); }

  // InvalidArgument unless 0 <= task_id < size().
  absl::Status CheckId(int task_id) const;
  // Whether `ref` may register. Errors: InvalidArgument (id out of range, an incarnation that is
  // negative or more than kMaxIncarnationStep above the newest seen), Aborted (a newer
  // incarnation registered, or this one was declared failed or shut down).
  absl::StatusOr<Admission> Admit(TaskRef ref) const;
  // OK if `ref` names the current, connected incarnation of a valid task id.
  // Errors: InvalidArgument, FailedPrecondition (not registered, shut down), Aborted (superseded,
  // declared failed).
  absl::Status CheckCaller(TaskRef ref) const;
  // The incarnation of `task_id` if it is connected.
  std::optional<base::Incarnation> AliveIncarnation(int task_id) const;
  // Sorts and checks a subset (empty, or every id: every task); it must contain `caller`.
  absl::StatusOr<Participants> ResolveSubset(std::vector<int> tasks, int caller) const;
  Participants All() const { return Participants::All(size()); }
  // The ids of the tasks failed now, in increasing order: what an arrival at a barrier checks
  // for news of a failure without visiting every participant.
  const std::set<int>& failed() const { return failed_; }

  // Gives `task` a new session (id returned in `*id`); returns the session's outbox it replaces,
  // or nullptr.
  std::shared_ptr<SessionOutbox> Attach(Task& task, std::shared_ptr<SessionOutbox> outbox,
                                        absl::Time now, uint64_t* id);
  // The task whose current session `session_id` is, or nullptr (replaced, retired, unknown).
  Task* FindSession(uint64_t session_id);
  // Takes away the task's session; returns its outbox, or nullptr when it had none.
  std::shared_ptr<SessionOutbox> Detach(Task& task);

  // The one way a task's state changes, so the counts below stay O(1): counting by a scan at
  // every change made registering N tasks O(N^2).
  void SetState(Task& task, TaskState state);
  int CountIn(TaskState state) const { return counts_[static_cast<size_t>(state)]; }
  int registered() const { return size() - CountIn(TaskState::kUnregistered); }
  bool AllShutDown() const { return CountIn(TaskState::kShutdown) == size(); }
  // Every task's info, with when it was last heard from.
  std::vector<TaskInfo> Infos() const;
  // "3" for a connected task, else "3 (failed: why)": for messages naming missing tasks.
  std::string Describe(int task_id) const;

 private:
  std::vector<Task> tasks_;
  static_assert(static_cast<int>(TaskState::kShutdown) == 3, "counts_ has one slot per state");
  std::array<int, 4> counts_{};  // by TaskState
  std::set<int> failed_;         // ids in TaskState::kFailed
  uint64_t next_session_id_ = 1;
  absl::flat_hash_map<uint64_t, int> session_task_;
};

}  // namespace phalanx::coord
