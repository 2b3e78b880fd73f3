// SyncPointTracker: this task's side of preemption sync, i.e. the answer behind
// CoordinationClient::ReachedSyncPoint(step). It follows the open preemption round, the step
// this task reported for it and the sync step the coordinator agreed, and decides for each step
// the training loop checks whether it is the sync step, must wait for the agreement, or must
// report itself. It does no I/O and never waits, so every transition is unit-tested with a
// FakeClock: CoordinationClientImpl sends the reports, waits (with Settled() as the condition
// and RoundWait() as the bound) and feeds the answers back.
//
// Why a report goes out the moment a round arrives (from the session thread, naming the first
// step not checked yet) rather than at the training loop's next check: a peer that checked this
// step before it heard of the round may already wait for us in that step's collective, so a
// report that waited for our loop could deadlock against it.
//
// Not thread-safe: the owner guards it with its own mutex (the wait's condition reads it).
//
// State machine (r: round id, s: step this task reported, k: agreed sync step):
//
//                  OnRound(r), r newer than any finished round:
//                  report s = the first step not checked yet
//   IDLE ───────────────────────────────────────────▶ REPORTED(r, s)
//     ▲                                                 │           │
//     │                 early report failed             │           │ early report
//     │                 (transient, e.g. the            │           │ answered: k
//     │                 coordinator restarting)         ▼           ▼
//     │                                   REPORT_FAILED(r, s) ────▶ AGREED(r, k)
//     │                                   Check(): the caller       │
//     │                                   reports itself (k)        │ Check(step >= k): true
//     │                                                             │ at k, false past it;
//     │  round closed (FailedPrecondition or                        │ ends r
//     │  DeadlineExceeded) from any state; r                        │
//     │  is remembered as finished, never reopens                   │
//     └─────────────────────────────────────────────────────────────┘
//
//   REPORTED: Check(step < s) is false (the sync step, the largest report, is later);
//             Check(step >= s) asks the caller to wait for the agreement (kWait).
//   From any state OnRound(r' > r) starts over in REPORTED(r', s'); Reset() (the coordinator
//   restarted and numbers rounds from 1 again) returns to IDLE and forgets finished rounds.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/base/clock.h"
#include "runtime/coordination/types.h"

namespace phalanx::client {

class SyncPointTracker {
 public:
  enum class Phase { kIdle, kReported, kReportFailed, kAgreed };

  // What ReachedSyncPoint(step) does next.
  struct Next {
    enum class Action {
      kAnswer,  // return `answer`
      kWait,    // wait until Settled(round.round) or RoundWait(round) passed, then AfterWait
      kReport,  // report `step` for `round` and wait for the answer, then OnOwnReportAnswer
    };
    Action action = Action::kAnswer;
    bool answer = false;
    coord::PreemptionRound round;
  };

  explicit SyncPointTracker(base::Clock& clock) : clock_(clock) {}

  // ---- Events from the session and the early report ----
  // A round arrived (new, or an update of the open one, e.g. an earlier deadline). Returns the
  // step to report for it at once when it is new to this task; nullopt when it is the open
  // round or one that already finished.
  std::optional<int64_t> OnRound(const coord::PreemptionRound& round);
  // The answer to the report OnRound asked for: the agreed sync step or the call's error.
  void OnEarlyReportAnswer(uint64_t round, const absl::StatusOr<int64_t>& sync_step);
  // The coordinator restarted: it numbers rounds from 1 again.
  void Reset();

  // ---- ReachedSyncPoint(step), in up to three parts ----
  // Records `step` as checked and decides what it can without waiting.
  Next Check(int64_t step);
  // The condition of a kWait: the agreement (or a failed early report) is in, or `round` is
  // no longer the open round.
  bool Settled(uint64_t round) const;
  // After a kWait (settled or timed out): an answer, or kReport when no agreement came.
  Next AfterWait(int64_t step, uint64_t round);
  // After a kReport: the answer to the caller's own report of `step`; ReachedSyncPoint's
  // result. A closed round ends here too, with the call's error.
  absl::StatusOr<bool> OnOwnReportAnswer(int64_t step, uint64_t round,
                                         const absl::StatusOr<int64_t>& sync_step);

  // How long a report for `round` may wait: until its deadline (10 min without one), and at
  // least 1 s so that a report sent at the deadline still gets its answer.
  absl::Duration RoundWait(const coord::PreemptionRound& round) const;

  Phase phase() const;
  // "IDLE", "IDLE after r2", "REPORTED(r1, s5)", "REPORT_FAILED(r1, s5)", "AGREED(r1, k7)".
  std::string DebugString() const;

 private:
  struct OpenRound {
    coord::PreemptionRound info;
    Phase phase = Phase::kReported;
    int64_t reported_step = 0;
    int64_t agreed_step = 0;  // in kAgreed
  };

  static Next Answer(bool answer) { return {Next::Action::kAnswer, answer, {}}; }
  bool IsOpen(uint64_t round) const { return open_.has_value() && open_->info.round == round; }
  // The agreed step `sync_step` is known: true at it; at or past it the round is over.
  bool Decide(int64_t step, uint64_t round, int64_t sync_step);
  // The round ended for this task (agreed step reached, deadline passed, closed).
  void Finish(uint64_t round);

  base::Clock& clock_;
  std::optional<OpenRound> open_;
  uint64_t finished_round_ = 0;      // rounds up to this one are over: ignore them
  int64_t next_unchecked_step_ = 0;  // one past the largest step checked
};

}  // namespace phalanx::client
