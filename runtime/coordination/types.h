// Value types shared by the coordination service core, its RPC handler and tests.
// Plain data; no locking.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/base/incarnation.h"

namespace phalanx::coord {

// A task and the incarnation (restart count) of the process that speaks for it.
struct TaskRef {
  int task_id = 0;
  base::Incarnation incarnation = 0;
  friend bool operator==(const TaskRef&, const TaskRef&) = default;
};

enum class TaskState { kUnregistered, kConnected, kFailed, kShutdown };
const char* TaskStateName(TaskState state);

struct TaskInfo {
  int task_id = 0;
  base::Incarnation incarnation = 0;
  TaskState state = TaskState::kUnregistered;
  std::string reason;
  absl::Time changed = absl::InfinitePast();
  // When the service last heard from this incarnation (registration, a session message, a
  // reported error, its session ending); InfinitePast: never. Filled in snapshots.
  absl::Time last_heard = absl::InfinitePast();
};

// Whether the job's tasks are training (stepping_tracker.h).
struct SteppingState {
  absl::Time first_step = absl::InfinitePast();      // InfinitePast: no report yet
  absl::Time stepping_since = absl::InfinitePast();  // the last time stepping (re)started
  absl::Time regroup_since = absl::InfinitePast();   // the last regroup's start (a failure)
  bool regrouping = false;                           // since regroup_since, until a report

  bool operator==(const SteppingState&) const = default;
};

// A spare as the job's state shows it: waiting (task_id -1) or the task it took over.
struct SpareInfo {
  std::string pod;
  int slot = 0;
  int task_id = -1;
  base::Incarnation incarnation = 0;
  absl::Time since = absl::InfinitePast();  // waiting since / assigned at
  friend bool operator==(const SpareInfo&, const SpareInfo&) = default;
};

struct JobSnapshot {
  std::string job;
  uint64_t version = 0;
  std::vector<TaskInfo> tasks;
  std::string coordinator_id;
  double rolled_back_seconds = 0;      // rollback_ledger.h: the job's total since this start
  SteppingState stepping = {};         // stepping_tracker.h: since this start
  std::vector<SpareInfo> spares = {};  // spare_pool.h: waiting spares, then take-overs
};

struct ErrorReport {
  TaskRef task;
  std::string message;
};

struct PreemptionNotice {
  std::string reason;
  absl::Time deadline = absl::InfiniteFuture();
  std::vector<int> affected_tasks;
};

struct PreemptionRound {
  uint64_t round = 0;
  absl::Time deadline = absl::InfiniteFuture();
  std::string reason;
  std::vector<int> affected_tasks;
};

// The outcome of a key-value compare-and-set (KvStore::CompareAndSet, the client's
// KvCompareAndSet).
struct CompareSetResult {
  bool swapped = false;
  std::optional<std::string> value;  // what the key holds afterwards; nullopt: absent
};

struct HeartbeatAck {
  int64_t sent_unix_micros = 0;
};

// The answer to a call made on the session stream (see SessionCall in the proto).
struct CallResult {
  uint64_t call_id = 0;
  absl::Status status;
  std::string value;
};

// What a task's session stream carries from the service to the task, in order.
using SessionEvent =
    std::variant<JobSnapshot, HeartbeatAck, TaskInfo, ErrorReport, PreemptionRound, CallResult>;

// Completion callbacks. Each is called exactly once, never under a service lock.
using StatusCallback = absl::AnyInvocable<void(absl::Status) &&>;
using ValueCallback = absl::AnyInvocable<void(absl::StatusOr<std::string>) &&>;
using SnapshotCallback = absl::AnyInvocable<void(JobSnapshot) &&>;
using AliveTasksCallback = absl::AnyInvocable<void(absl::StatusOr<std::vector<TaskRef>>) &&>;
using SyncStepCallback = absl::AnyInvocable<void(absl::StatusOr<int64_t>) &&>;

}  // namespace phalanx::coord
