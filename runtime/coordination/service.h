// CoordinationService: the per-job coordination state machine. Transport-agnostic: the gRPC
// layer (rpc_handler.h, coordinator_server.h) and tests drive it directly. All state is in memory.
//
// Thread-safe: one mutex guards all state; every callback (RPC completion, session notify) is
// collected under the lock and run after it is released. Time comes from the injected Clock;
// deadlines and heartbeat staleness are evaluated by Tick(now), which a PeriodicRunner calls in
// production and tests call after FakeClock::Advance.
//
// Task state machine (per task id; `inc` is the incarnation):
//
//                 Register(inc)                       session break / heartbeat timeout /
//  UNREGISTERED ────────────────▶ CONNECTED ───────── ReportError ─────────────▶ FAILED
//                                  │   ▲  │                                         │
//                                  │   └──┘ Register(inc' > inc): the old           │
//                                  │        incarnation is retired (its session     │
//                                  │        and pending calls end with Aborted)     │
//                                  │                                                │
//                                  │ shutdown barrier passed    Register(inc' > inc)│
//                                  │ or Leave                                       │
//                                  ▼                      CONNECTED ◀───────────────┘
//                               SHUTDOWN ── Register(inc' > inc) ──▶ CONNECTED
//
// A registered task has `heartbeat_timeout` to open its session; a connected task must send a
// heartbeat (any session message) at least every `heartbeat_timeout`. Registering again with
// the same incarnation while connected is idempotent; a failed or shut-down incarnation cannot
// come back (Aborted): only a new incarnation can.
//
// Events for every peer (a task failed or restarted, a task reported an error) are coalesced per
// tick into one batch all sessions share (peer_events.h): O(N) memory when N tasks fail at once,
// and a single failure is still pushed without delay.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/base/clock.h"
#include "runtime/coordination/alive_tasks.h"
#include "runtime/coordination/barrier_table.h"
#include "runtime/coordination/completions.h"
#include "runtime/coordination/job_watchers.h"
#include "runtime/coordination/kv_store.h"
#include "runtime/coordination/metrics.h"
#include "runtime/coordination/peer_events.h"
#include "runtime/coordination/preemption_sync.h"
#include "runtime/coordination/rollback_ledger.h"
#include "runtime/coordination/session_outbox.h"
#include "runtime/coordination/spare_pool.h"
#include "runtime/coordination/stepping_tracker.h"
#include "runtime/coordination/task_table.h"
#include "runtime/coordination/types.h"

namespace phalanx::coord {

class CoordinationService {
 public:
  struct Options {
    std::string job = "job";
    int num_tasks = 1;
    absl::Duration heartbeat_interval = absl::Seconds(1);
    absl::Duration heartbeat_timeout = absl::Seconds(10);
    absl::Duration barrier_default_timeout = absl::Minutes(5);
    absl::Duration shutdown_timeout = absl::Minutes(1);
    // Upper bound on any requested wait, so no call can pin state for days.
    absl::Duration max_wait = absl::Hours(1);
    // Random per start when empty; tells reconnecting clients the coordinator restarted.
    std::string coordinator_id;
    // Memory bounds: any holder of the job token can write, so every stored thing is capped.
    KvStore::Limits kv_limits;
    BarrierTable::Limits barrier_limits;
    SparePool::Limits spare_limits;
    // A reported error message is broadcast to every session: longer ones are truncated.
    size_t max_error_message_bytes = 4096;
    // After key-value deletes have freed this many bytes, `release_memory` runs (outside the
    // lock) to hand freed heap back to the system; nullptr: malloc_trim(0).
    size_t release_memory_after_bytes = 8 << 20;
    std::function<void()> release_memory;
  };

  struct Registration {
    std::string job;
    int num_tasks;
    absl::Duration heartbeat_interval;
    absl::Duration heartbeat_timeout;
    std::string coordinator_id;
  };

  // InvalidArgument for nonsensical options (no tasks, non-positive timeouts, interval ≥ timeout).
  static absl::StatusOr<std::unique_ptr<CoordinationService>> Create(Options options,
                                                                     base::Clock& clock,
                                                                     CoordinatorMetrics& metrics);
  ~CoordinationService();

  // Errors: InvalidArgument (task id out of range, incarnation more than kMaxIncarnationStep
  // above the newest seen), Aborted (a newer incarnation exists, or this
  // incarnation was declared failed or shut down), Unavailable (the service is stopping).
  absl::StatusOr<Registration> Register(TaskRef task);

  // Opens the task's session; the first event pushed is the job's header (a JobSnapshot
  // without task entries). Replaces an older
  // session of the same incarnation (which ends with Aborted). Returns the session id.
  // Errors: as CheckCaller.
  absl::StatusOr<uint64_t> OpenSession(TaskRef task, std::shared_ptr<SessionOutbox> outbox);
  // Any message on the session counts as a heartbeat; the ack echoes `sent_unix_micros`.
  void Heartbeat(uint64_t session_id, int64_t sent_unix_micros);
  // The session's task says it is leaving (`reason`, bounded like a reported error): its
  // connected incarnation becomes SHUTDOWN ("left: reason") instead of failing when the session
  // ends; its own waits end Cancelled, its peers hear of it, and nothing of theirs fails for it.
  // The session is ended (the transport closes the stream). Nothing for an unknown session.
  void Leave(uint64_t session_id, std::string reason);
  // The transport's stream ended (`why`). A connected task whose current session this is fails.
  void CloseSession(uint64_t session_id, const absl::Status& why);
  // The same for many sessions at once (a connection carrying many tasks ended): the cost is
  // O(sessions + tasks), not O(sessions × tasks), and the failures reach peers as one batch.
  void CloseSessions(const std::vector<uint64_t>& session_ids, const absl::Status& why);

  // Declares the task failed with `message` and tells every other task. Errors: as CheckCaller.
  absl::Status ReportError(TaskRef task, std::string message);

  // Waits until every task in `tasks` (empty: all) arrives with its current incarnation.
  // Errors: InvalidArgument (bad id/subset/timeout), Aborted (caller restarted or failed),
  // DeadlineExceeded (names the tasks that never arrived), Cancelled.
  void Barrier(TaskRef task, std::string id, absl::Duration timeout, std::vector<int> tasks,
               StatusCallback done);
  // Fails the pending barrier for every waiter with Cancelled. Errors: NotFound, as CheckCaller.
  absl::Status CancelBarrier(TaskRef task, const std::string& id);

  // Key-value store; see kv_store.h for key rules and errors.
  absl::Status KvInsert(const std::string& key, std::string value, bool allow_overwrite);
  void KvGet(const std::string& key, std::optional<TaskRef> waiter, absl::Duration timeout,
             ValueCallback done);
  absl::StatusOr<std::string> KvTryGet(const std::string& key);
  // One page of `directory` after `page_token`; with `paged` false the whole directory or
  // ResourceExhausted (see KvStore::GetDir).
  absl::StatusOr<KvStore::DirPage> KvGetDir(const std::string& directory,
                                            const std::string& page_token = "", bool paged = false);
  absl::StatusOr<int> KvDelete(const std::string& key);
  // Atomic counter and compare-and-set (KvStore::Add, KvStore::CompareAndSet).
  absl::StatusOr<int64_t> KvAdd(const std::string& key, int64_t delta);
  absl::StatusOr<CompareSetResult> KvCompareAndSet(const std::string& key,
                                                   const std::optional<std::string>& expected,
                                                   std::string desired);

  // Long poll: answers when the job's version differs from `known_version`, or with the
  // unchanged state when `timeout` passes. Never fails (Stop() answers with the last state).
  void WatchJobState(uint64_t known_version, absl::Duration timeout, SnapshotCallback done);
  JobSnapshot Snapshot();
  // The newest incarnation of `task_id` that registered (nullopt: none yet, or not a task id):
  // what a credential bound to older incarnations has been superseded by.
  std::optional<base::Incarnation> NewestIncarnation(int task_id);

  // Agreement on the alive members of `tasks` (empty: all); see alive_tasks.h.
  void GetAliveTasks(TaskRef task, std::vector<int> tasks, absl::Duration timeout,
                     AliveTasksCallback done);

  // Opens (or joins) a preemption round and tells every session. InvalidArgument for an
  // affected task id out of range.
  absl::StatusOr<std::pair<PreemptionRound, bool>> NotifyPreemption(PreemptionNotice notice);
  // Reports the step `task` is about to run; answers with the agreed sync step.
  // Errors: FailedPrecondition (round not open), DeadlineExceeded, as CheckCaller.
  void ReportSyncStep(TaskRef task, uint64_t round, int64_t step, SyncStepCallback done);

  // `task` resumed from a checkpoint in recovery `recovery` and so discarded `rolled_back` of
  // work (rollback_ledger.h: each recovery counts once). Returns the job's total in seconds; a
  // change bumps the job's version, so WatchJobState (the operator's goodput) hears of it.
  // Errors: InvalidArgument (see RollbackLedger::Report), as CheckCaller.
  absl::StatusOr<double> ReportRolledBack(TaskRef task, const std::string& recovery,
                                          absl::Duration rolled_back);
  // `task` completed a training step since it registered (stepping_tracker.h: the first step,
  // or the end of a regroup). A change bumps the job's version. Errors: as CheckCaller.
  absl::Status ReportStepping(TaskRef task);

  // A spare (spec.spares, ADR 0007) of `slot`, in pod `pod`, waits up to `timeout` (0: 10 s) to
  // be given a failed task (spare_pool.h). A task's failure is taken over by the spare that
  // waited longest unless the task closed its own session (its script may simply have ended:
  // only the operator can tell, from the pod's exit). InvalidArgument (bad timeout),
  // ResourceExhausted (too many spares wait), Unavailable (stopping).
  void AwaitAssignment(int slot, std::string pod, absl::Duration timeout, SpareAnswer done);
  static constexpr absl::Duration kDefaultSpareWait = absl::Seconds(10);

  // The shutdown barrier: when every task arrives they all become SHUTDOWN.
  // Errors: as Barrier.
  void Shutdown(TaskRef task, absl::Duration timeout, StatusCallback done);
  bool AllTasksShutDown();

  // Expires deadlines and declares tasks with stale heartbeats failed.
  void Tick(absl::Time now);
  // Fails every pending call (barriers, blocking gets, alive-task agreements, sync-step reports)
  // and ends every session with Unavailable ("coordinator is shutting down; retry"): a stopping
  // coordinator is a transient outage to its clients, never a cancellation. Idempotent.
  void Stop();

  const Options& options() const { return options_; }
  // Finished-barrier results held and the bytes of their ids and messages (tests, metrics).
  std::pair<size_t, size_t> BarrierMemory();

 private:
  CoordinationService(Options options, base::Clock& clock, CoordinatorMetrics& metrics);

  // OK if `task` names the current, connected incarnation of a valid task id.
  absl::Status CheckCallerLocked(TaskRef task) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Resolves a timeout: 0 → `fallback`, negative → InvalidArgument, capped at max_wait.
  absl::StatusOr<absl::Duration> ResolveTimeout(absl::Duration timeout,
                                                absl::Duration fallback) const;
  AliveTasksAgreement::AliveFn AliveFnLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // `ref` (admitted by tasks_.Admit) becomes its task's connected incarnation; `replacing`: it
  // retires the one registered before.
  void ConnectLocked(TaskRef ref, bool replacing, Completions& out)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A batch of task changes (CloseSessions, Tick): what each change triggers (agreements
  // re-checked, watchers answered with a snapshot, gauges), O(tasks) each, runs once at
  // EndBatchLocked instead of once per task. 6,000 tasks of one dropped connection once stalled
  // every session for 15 s this way.
  void BeginBatchLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void EndBatchLocked(Completions& out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A task's state changed: re-check agreements, answer watchers, update gauges.
  void MembershipChangedLocked(Completions& out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SetStateLocked(TaskTable::Task& task, TaskState state, std::string reason, Completions& out)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Answers every WatchJobState waiting on the version that just changed.
  void AnswerWatchersLocked(Completions& out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // `spare_may_take_over`: a waiting spare is given the task's next incarnation at once.
  void FailTaskLocked(TaskTable::Task& task, FailureKind kind, std::string reason, Completions& out,
                      bool spare_may_take_over = true) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Gives `task` at `incarnation` to the longest-waiting spare; false when none waits.
  bool TakeOverLocked(int task, base::Incarnation incarnation, Completions& out)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Ends expired spare waits and hands on take-overs nobody registered for.
  void ExpireSparesLocked(absl::Time now, Completions& out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Ends everything the incarnation `gone` had open: its session and pending calls.
  // Fail fast: `failed` (a task's current incarnation) is dead, so every barrier it takes part
  // in and every get another task waits in fails now with PeerFailedError, not at its timeout.
  void FailPeerWaitsLocked(TaskRef failed, const std::string& reason, Completions& out)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Cancelled("peer task N (incarnation I) failed: reason"): what a wait fails with.
  static absl::Status PeerFailedError(TaskRef failed, const std::string& reason);
  void RetireIncarnationLocked(TaskTable::Task& task, const absl::Status& why, Completions& out)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void PushLocked(TaskTable::Task& task, SessionEvent event, Completions& out)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void BroadcastLocked(const SessionEvent& event, Completions& out)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Queues `event` (a TaskInfo or an ErrorReport) for every session: at once if nothing went
  // out since the last tick, else at the next one.
  void TellPeersLocked(SessionEvent event, Completions& out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Sends the held peer events to every session as one shared batch.
  void FlushPeerEventsLocked(Completions& out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void MarkAllShutDown();
  JobSnapshot SnapshotLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void UpdateGaugesLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Options options_;
  base::Clock& clock_;
  CoordinatorMetrics& metrics_;

  mutable absl::Mutex mu_;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
  bool batching_ ABSL_GUARDED_BY(mu_) = false;       // between Begin/EndBatchLocked
  bool batch_changed_ ABSL_GUARDED_BY(mu_) = false;  // a task changed during the batch
  uint64_t version_ ABSL_GUARDED_BY(mu_) = 1;
  BarrierTable barriers_ ABSL_GUARDED_BY(mu_);
  KvStore kv_ ABSL_GUARDED_BY(mu_);
  AliveTasksAgreement alive_ ABSL_GUARDED_BY(mu_);
  PreemptionSync sync_ ABSL_GUARDED_BY(mu_);
  RollbackLedger rollbacks_ ABSL_GUARDED_BY(mu_);
  SteppingTracker stepping_ ABSL_GUARDED_BY(mu_);
  SparePool spares_ ABSL_GUARDED_BY(mu_);
  JobStateWatchers watchers_ ABSL_GUARDED_BY(mu_);
  TaskTable tasks_ ABSL_GUARDED_BY(mu_);
  PeerEventCoalescer peer_events_ ABSL_GUARDED_BY(mu_);
  // Key-value bytes deleted since memory was last handed back.
  size_t freed_since_release_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace phalanx::coord
