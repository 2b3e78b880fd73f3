// CliqueManager: the lifecycle of this process's NCCL communicators ("cliques"), keyed by
// CliqueKey (job, members with incarnations, devices). It creates them non-blocking with a
// deadline, aborts them when a peer restarts, leaves or errors, and re-forms them: with
// ncclCommShrink when a member is gone for good, with a fresh init (new unique id) when a
// member came back with a new incarnation. Used by the runtime client (one manager per
// training process, one clique per (key, local rank)) and by the node agent's health checks.
//
//   Acquire ──▶ FORMING ───── comm ready ─────▶ READY ◀──────── comm ready ──────────┐
//                 │                              │ membership change                  │
//                 │                              ▼ (revoke; without revoke, abort)    │
//                 │                           ABORTING ── member left ──▶ SHRINKING ──┤
//                 │                              ├─── member restarted ─▶ REFORMING ──┘
//                 │                              └─── member down ──▶ WAITING
//                 │                         WAITING ── every member alive ──▶ REFORMING
//                 ▼ deadline or NCCL error, no attempts left (attempts left: FORMING again)
//               FAILED ◀── async error in READY; deadline or error in SHRINKING/REFORMING
//                 └── membership change touching its members ──▶ REFORMING; Acquire ──▶ FORMING
//
// ABORTING lasts while a revoked communicator quiesces (ncclCommRevoke); without revoke the
// communicator is aborted at once (or shrunk with NCCL_SHRINK_ABORT) and ABORTING is skipped.
// WAITING: a member is down and has not registered its next incarnation yet; nothing runs.
// The caller stops its device work on a clique before OnMembershipChange (NCCL requires it).
//
// Unique ids: rank 0 of each attempt creates one and publishes it under
// "<key.KvPrefix()>/id<attempt>"; the other ranks fetch it from Poll (never blocking) until the
// attempt's deadline. Every rank derives the same keys from the same membership events.
//
// Time: Poll(now) is the tick (advance inits, enforce deadlines, detect async errors); its
// owner calls it periodically (a base::PeriodicRunner in production, tests after
// FakeClock::Advance). The manager starts no threads and never sleeps.
//
// Thread-safety: thread-safe. NCCL calls run under the manager's lock: with blocking=0 they
// return at once, and NCCL forbids concurrent management calls on one communicator anyway.
// Exchange calls (publish/fetch, possibly RPCs) and state callbacks run after the lock is
// released, so a callback may call back into the manager.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/base/clock.h"
#include "runtime/clique/clique_key.h"
#include "runtime/clique/membership_diff.h"
#include "runtime/clique/nccl_api.h"
#include "runtime/clique/unique_id_exchange.h"

namespace phalanx::clique {

enum class CliqueState { kForming, kReady, kAborting, kWaiting, kShrinking, kReforming, kFailed };
const char* CliqueStateName(CliqueState state);

using CliqueId = uint64_t;

// A snapshot of one clique.
struct CliqueInfo {
  CliqueId id = 0;
  CliqueKey key;
  int rank = 0;
  CliqueState state = CliqueState::kForming;
  absl::Status status;  // why it last failed or was torn down; OK otherwise
  CommHandle comm;      // valid in READY (and while forming, for diagnostics)
  int attempt = 0;      // init attempts made for the current key, minus one
};

// For metrics (an owner exports them; the node agent shows cliques by state from its registry).
struct CliqueCounters {
  std::map<CliqueState, int> cliques_by_state;
  int64_t aborts = 0;         // communicators torn down (error, deadline, membership change)
  int64_t reforms = 0;        // re-forms that reached READY (fresh init or shrink)
  int64_t shrinks = 0;        // of those, by ncclCommShrink
  int64_t init_timeouts = 0;  // attempts that missed their deadline
  int64_t async_errors = 0;   // errors reported by ncclCommGetAsyncError
};

class CliqueManager {
 public:
  // Runs after the manager's lock is released, in transition order, on the thread that made
  // the transition (Acquire, Poll, OnMembershipChange).
  using StateCallback = std::function<void(const CliqueInfo& clique, CliqueState old_state,
                                           CliqueState new_state, const absl::Status& status)>;

  struct Options {
    // Deadline of each re-form and of each retry, counted from when it starts.
    absl::Duration reform_timeout = absl::Minutes(2);
    // Init attempts per key before FAILED (a missed deadline or an NCCL error is one attempt).
    int max_init_attempts = 1;
    StateCallback on_state_change;
  };

  CliqueManager(NcclApi& nccl, UniqueIdExchange& exchange, base::Clock& clock, Options options);
  // Aborts every communicator still alive.
  ~CliqueManager();

  CliqueManager(const CliqueManager&) = delete;
  CliqueManager& operator=(const CliqueManager&) = delete;

  // Starts forming `key` as `my_rank` on `cuda_device` (non-blocking) and returns its id; Poll
  // moves it to READY or FAILED (DeadlineExceeded once `deadline` passes). Acquiring a FAILED
  // clique's key and rank again restarts it with the next attempt and returns its id.
  // Errors: InvalidArgument (rank out of range), AlreadyExists (this key and rank are already
  // held and not FAILED). NCCL and exchange failures show as the clique going FAILED (through
  // Get and the callback), like every later failure.
  absl::StatusOr<CliqueId> Acquire(const CliqueKey& key, int my_rank, absl::Time deadline,
                                   int cuda_device = kCurrentCudaDevice);

  // The tick: fetches pending unique ids, advances inits, shrinks and revokes, enforces
  // deadlines (abort, DeadlineExceeded) and aborts READY cliques that report an async error.
  void Poll(absl::Time now);

  // The job's current membership (every task, alive or not; a task not listed has left for
  // good). Every clique with a member that left, restarted or is down is torn down and
  // re-formed as the state diagram says.
  void OnMembershipChange(absl::Span<const MemberStatus> members);

  // Aborts the clique's communicators (ncclCommAbort: collectives in flight on them end) and
  // fails it with `why`, as for a fatal error: a request from outside (the node agent saw its
  // GPU fail). Acquiring its key again re-forms it. A FAILED clique stays as it is. NotFound for
  // an unknown id.
  absl::Status Abort(CliqueId id, absl::Status why);

  // Destroys (READY) or aborts (otherwise) the clique's communicators and forgets it.
  // NotFound for an unknown id.
  absl::Status Release(CliqueId id);

  // NotFound for an unknown id.
  absl::StatusOr<CliqueInfo> Get(CliqueId id) const;
  // The communicator to run collectives on. FailedPrecondition unless READY (the message says
  // the state and last status); NotFound for an unknown id.
  absl::StatusOr<CommHandle> Comm(CliqueId id) const;
  std::vector<CliqueInfo> List() const;
  CliqueCounters counters() const;

 private:
  // What ABORTING leads to once the old communicator is quiescent.
  enum class Next { kNone, kShrink, kReinit, kWait };
  struct Entry {
    CliqueId id = 0;
    CliqueKey key;
    int task_id = 0;    // this process's task and device in `key`
    int device_id = 0;  // (they survive re-keying; the rank does not)
    int rank = 0;
    int cuda_device = kCurrentCudaDevice;
    CliqueState state = CliqueState::kForming;
    absl::Status status;
    CommHandle comm;      // being formed or shrunk into, or READY
    CommHandle old_comm;  // revoked (ABORTING) or the shrink's parent (SHRINKING)
    bool old_comm_revoked = false;
    int attempt = 0;
    absl::Time deadline = absl::InfiniteFuture();
    bool awaiting_id = false;  // rank != 0 and this attempt's id is not fetched yet
    uint64_t generation = 0;   // bumped by every (re)start; stale exchange results are dropped
    Next next = Next::kNone;
    std::vector<int> shrink_excluded;  // ranks of the old key to drop (Next::kShrink)
  };
  struct Outbox;

  CliqueInfo InfoLocked(const Entry& e) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SetStateLocked(Entry& e, CliqueState state, absl::Status status, Outbox& out)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Starts attempt `e.attempt` of `e.key` (rank 0: new id, init, publish queued; others: wait
  // for the id), entering `state`.
  void StartInitLocked(Entry& e, CliqueState state, absl::Time deadline, absl::Status why,
                       absl::Time now, Outbox& out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void StartCommInitLocked(Entry& e, const NcclUniqueId& id, absl::Time now, Outbox& out)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The attempt failed: abort what it created, then retry or FAILED.
  void FailAttemptLocked(Entry& e, absl::Status why, absl::Time now, Outbox& out)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void AbortCommsLocked(Entry& e) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void AdvanceLocked(Entry& e, absl::Time now, Outbox& out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // ABORTING is over (old communicator quiescent, or aborted): shrink, re-init or wait.
  void AfterTeardownLocked(Entry& e, absl::Time now, Outbox& out)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ApplyMembershipLocked(Entry& e, const std::map<int, MemberStatus>& members, absl::Time now,
                             Outbox& out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Publishes queued ids and runs callbacks, without the lock.
  void Flush(Outbox& out) ABSL_LOCKS_EXCLUDED(mu_);

  NcclApi& nccl_;
  UniqueIdExchange& exchange_;
  base::Clock& clock_;
  const Options options_;

  mutable absl::Mutex mu_;
  std::map<CliqueId, Entry> entries_ ABSL_GUARDED_BY(mu_);
  CliqueId next_id_ ABSL_GUARDED_BY(mu_) = 1;
  CliqueCounters counters_ ABSL_GUARDED_BY(mu_);
};

}  // namespace phalanx::clique
