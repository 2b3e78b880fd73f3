// CoordinationClient: what a training process uses to take part in its job's coordination.
// The seam between training code and the service: CoordinationClientImpl
// (coordination_client_impl.h) is the real one. All methods are thread-safe. Blocking methods wait
// at most their timeout (plus the config's rpc_margin).
//
// Error codes common to every call: Unavailable (coordinator unreachable or restarting: retry
// after the client reconnects), Aborted (this incarnation was superseded or declared failed:
// the process should exit and be restarted), Unauthenticated (wrong token),
// InvalidArgument (bad request), FailedPrecondition (the coordinator does not know this task
// as registered, e.g. before Connect).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "runtime/coordination/types.h"

namespace phalanx::client {

using coord::CompareSetResult;
using coord::ErrorReport;
using coord::JobSnapshot;
using coord::PreemptionNotice;
using coord::PreemptionRound;
using coord::TaskInfo;
using coord::TaskRef;
using coord::TaskState;

// Called on the client's session thread, in order; keep them short (no blocking calls: the
// session's heartbeats wait while a callback runs).
struct ClientCallbacks {
  // A peer failed or registered again with a new incarnation.
  std::function<void(const TaskInfo&)> on_peer_change;
  // A task reported an error.
  std::function<void(const ErrorReport&)> on_error;
  // A preemption round opened: ReachedSyncPoint will now agree on a step.
  std::function<void(const PreemptionRound&)> on_preemption;
  // The session came back after a break; `coordinator_restarted` means its state (KV,
  // barriers) was lost and the task should re-run its recovery protocol.
  std::function<void(bool coordinator_restarted)> on_reconnect;
  // This incarnation can no longer take part (superseded or declared failed). Terminal.
  std::function<void(const absl::Status&)> on_fatal;
};

class CoordinationClient {
 public:
  virtual ~CoordinationClient() = default;

  virtual TaskRef task() const = 0;
  virtual int num_tasks() const = 0;

  // Registers the task and opens its session; returns once connected. Errors: DeadlineExceeded
  // (coordinator not reachable in time), Aborted, Unauthenticated.
  virtual absl::Status Connect(absl::Duration timeout) = 0;
  // Waits until the session is up again after a break (or fails with the fatal status).
  virtual absl::Status WaitUntilConnected(absl::Duration timeout) = 0;
  // True while the task is registered and its session is open.
  virtual bool connected() const = 0;

  // Barrier over `tasks` (empty: all). DeadlineExceeded names the tasks that never arrived;
  // Cancelled when any participant cancelled it.
  virtual absl::Status Barrier(const std::string& id, absl::Duration timeout,
                               const std::vector<int>& tasks = {}) = 0;
  virtual void BarrierAsync(const std::string& id, absl::Duration timeout,
                            const std::vector<int>& tasks,
                            absl::AnyInvocable<void(absl::Status) &&> done) = 0;
  virtual absl::Status CancelBarrier(const std::string& id) = 0;
  // Non-blocking form, safe to call from a callback.
  virtual void CancelBarrierAsync(const std::string& id,
                                  absl::AnyInvocable<void(absl::Status) &&> done) = 0;

  // Key-value store (see runtime/coordination/kv_store.h for key rules).
  virtual absl::Status KvInsert(const std::string& key, const std::string& value,
                                bool allow_overwrite) = 0;
  virtual absl::StatusOr<std::string> KvGet(const std::string& key, absl::Duration timeout) = 0;
  // Non-blocking forms: `done` runs once, on a client thread (on the session wire, the reader
  // thread the process's clients share); keep it short and do not wait in it for another
  // coordination call. They let one
  // thread keep many operations in flight.
  virtual void KvInsertAsync(const std::string& key, const std::string& value, bool allow_overwrite,
                             absl::AnyInvocable<void(absl::Status) &&> done) = 0;
  virtual void KvGetAsync(const std::string& key, absl::Duration timeout,
                          absl::AnyInvocable<void(absl::StatusOr<std::string>) &&> done) = 0;
  virtual absl::StatusOr<std::string> KvTryGet(const std::string& key) = 0;
  // Every entry under `directory`, in key order. The coordinator answers in bounded pages and
  // this fetches them all; not a snapshot (keys changed meanwhile may or may not appear).
  virtual absl::StatusOr<std::vector<std::pair<std::string, std::string>>> KvGetDir(
      const std::string& directory) = 0;
  virtual absl::StatusOr<int> KvDelete(const std::string& key) = 0;
  // Atomic counter: the value under `key` is a decimal int64 (absent: 0); stores and returns
  // value + delta. FailedPrecondition when the value is not a decimal integer, OutOfRange on
  // overflow. Never retried by the client: an Unavailable may or may not have added.
  virtual absl::StatusOr<int64_t> KvAdd(const std::string& key, int64_t delta) {
    (void)key;
    (void)delta;
    return absl::UnimplementedError("KvAdd");
  }
  // Stores `desired` when `key` holds `expected` (nullopt: when `key` is absent).
  virtual absl::StatusOr<CompareSetResult> KvCompareAndSet(
      const std::string& key, const std::optional<std::string>& expected,
      const std::string& desired) {
    (void)key;
    (void)expected;
    (void)desired;
    return absl::UnimplementedError("KvCompareAndSet");
  }

  // Declares this task failed with `message`; every peer hears of it.
  virtual absl::Status ReportError(const std::string& message) = 0;
  // Long poll for a job version other than `known_version` (0: now).
  virtual absl::StatusOr<JobSnapshot> WatchJobState(uint64_t known_version,
                                                    absl::Duration timeout) = 0;
  // Every alive member of `tasks` (empty: all) must call; all get the same answer.
  virtual absl::StatusOr<std::vector<TaskRef>> GetAliveTasks(const std::vector<int>& tasks,
                                                             absl::Duration timeout) = 0;
  // Opens or joins a preemption round (used by agents, operators, and tests).
  virtual absl::StatusOr<PreemptionRound> NotifyPreemption(const PreemptionNotice& notice) = 0;
  // Call once per step before running it. True exactly once, at the step every task agreed to
  // checkpoint at, after a preemption round opened; false otherwise (no RPC when no round).
  virtual absl::StatusOr<bool> ReachedSyncPoint(int64_t step) = 0;

  // The shutdown barrier; after it passes the session ends without counting as a failure.
  virtual absl::Status Shutdown(absl::Duration timeout) = 0;

  // This task leaves on its own, without the shutdown barrier: its incarnation ends SHUTDOWN
  // ("left: <reason>"), not FAILED, so no peer's barrier or get fails for it; peers hear of it
  // and a barrier including it waits for its next incarnation. Ends the session (waiting up to
  // `timeout` for the coordinator to confirm); later calls fail. FailedPrecondition without an
  // open session; DeadlineExceeded when unconfirmed (the session is closed anyway). The default
  // is Unimplemented, for test doubles.
  virtual absl::Status Leave(const std::string& reason, absl::Duration timeout) {
    (void)reason;
    (void)timeout;
    return absl::UnimplementedError("Leave");
  }

  // After resuming from a checkpoint: this task discarded `rolled_back` of work (the wall time
  // it had spent on the steps it now runs again, not the time it waited after the failure).
  // Every task of one recovery passes the same `recovery` name (e.g. the new membership's
  // epoch); the coordinator counts each recovery once and the operator books the job's total
  // as lost goodput. InvalidArgument for an empty name or a negative amount. The default is
  // Unimplemented, for test doubles that do not take part.
  virtual absl::Status ReportRolledBack(const std::string& recovery, absl::Duration rolled_back) {
    (void)recovery;
    (void)rolled_back;
    return absl::UnimplementedError("ReportRolledBack");
  }

  // This task completed a training step: call it after every step (only the first call after a
  // registration reaches the coordinator; the rest return at once). The coordinator learns the
  // job's first step and when a regroup after a failure ended, and the operator books the time
  // before them as not productive. The default is Unimplemented, for test doubles.
  virtual absl::Status ReportStepping() { return absl::UnimplementedError("ReportStepping"); }
};

}  // namespace phalanx::client
