// SampleTrainer: a stand-in for a data-parallel training loop, driven through the runtime
// client the way real training code would be. Every step ends in a barrier (standing in for
// the all-reduce). It checkpoints every K steps, and follows the recovery protocol below.
//
// Recovery (at start, after a peer failure or restart, after a coordinator restart):
//   1. wait until every task is connected; the epoch is the job's incarnation vector plus the
//      coordinator id, so every task computes the same epoch for the same membership;
//   2. publish this task's offer under recovery/<epoch>/<task>: the steps it can resume from
//      (its kept checkpoints, the step it holds in memory) and the step its unanswered step
//      barrier would have taken it to (recovery_offer.h);
//   3. barrier recovery/<epoch>; resume from the newest step every offer can resume from
//      (AgreeResumeStep). Step barriers are named <epoch>/step-<n>, fresh for every epoch.
// A coordinator that stops, moves or restarts never fails the task: any call that meets it
// returns Unavailable, and the task waits for its client to re-register with the successor,
// re-runs recovery (the successor lost the key-value data and barriers) and goes on; the
// shutdown barrier is re-entered.
// A recovery that resumes from a step before the one it was at reports the wall time it had
// spent on the discarded steps (ReportRolledBack, named by the new epoch so every task of the
// recovery counts once): the operator books it as lost goodput.
// A preemption round makes every task checkpoint at the same agreed step. A task the round
// names as about to be preempted then leaves (Run returns with LeftForPreemption() true), as a
// JAX program does at its preemption sync point: its peers wait in that step's barrier and
// resume from the agreed checkpoint once it is back, so no step is lost. Each step checks the
// sync point before acting on a membership change: that task's leaving may be announced before
// a slower peer has checked the sync step, and recovering first would skip its checkpoint.
//
// It prints one `EVENT t_ms=<unix ms> task=<id> inc=<n> kind=<kind> ...` line per event on
// stdout; the demo and the tests read them. Not thread-safe apart from the client callbacks.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "examples/sample_worker/checkpoint_store.h"
#include "runtime/client/coordination_client.h"

namespace phalanx::examples {

struct TrainerOptions {
  int64_t steps = 100;
  absl::Duration step_time = absl::Milliseconds(20);
  // Simulated start-up once connected, before the first step (loading a model): the time the
  // operator books as before the first step, or for a replacement as its group's regroup.
  absl::Duration load_time = absl::ZeroDuration();
  int64_t checkpoint_every = 10;
  std::string checkpoint_dir;
  absl::Duration barrier_timeout = absl::Seconds(60);
  absl::Duration connect_timeout = absl::Seconds(60);
  absl::Duration recovery_timeout = absl::Seconds(120);
};

class SampleTrainer {
 public:
  SampleTrainer(TrainerOptions options, client::TaskRef task);

  // Callbacks to hand to the client when it is created (they act once Run has started).
  client::ClientCallbacks Callbacks();
  // Connects, then runs to the last step and through the shutdown barrier, or until it has
  // checkpointed at a preemption sync point that names this task.
  absl::Status Run(client::CoordinationClient& client);
  // Run returned OK because this task was being preempted (after its checkpoint), not done.
  bool LeftForPreemption() const { return left_for_preemption_; }
  // From now on the process is leaving with `code` (the node agent's abort: 5): the client's
  // fatal callback, which the error report about to be sent brings, exits with it too.
  void LeaveWith(int code) { shared_->leaving_code.store(code); }

  static void Event(const client::TaskRef& task, const std::string& kind,
                    const std::string& fields = "");

 private:
  struct Epoch {
    std::string id;
    int64_t resume_step;
    uint64_t changes_seen;  // membership changes already reflected in this epoch
  };
  // The step a step barrier would have taken this task to, and the state there, while that
  // barrier's outcome is unknown (it ended without an answer after this task arrived).
  struct Pending {
    int64_t step;
    uint64_t state;
  };
  // State shared with the client's callbacks and in-flight RPC completions, which may run
  // after a wait was abandoned (hence shared ownership).
  struct Shared {
    absl::Mutex mu;
    uint64_t membership_changes ABSL_GUARDED_BY(mu) = 0;
    std::string current_barrier ABSL_GUARDED_BY(mu);
    // The newest preemption round named this task (empty affected list: not named).
    bool named_in_preemption ABSL_GUARDED_BY(mu) = false;
    std::atomic<int> leaving_code{0};  // LeaveWith
  };

  uint64_t MembershipChanges();
  // Waits for barrier `id`, or returns Cancelled as soon as the membership changes from
  // `seen` (a survivor must not wait for a task that is gone, even if it entered the barrier
  // just after the failure was announced). `arrived`: set when the arrival was sent.
  absl::Status AwaitBarrier(const std::string& id, absl::Duration timeout, uint64_t seen,
                            bool* arrived = nullptr);
  // Runs the recovery protocol until it succeeds or recovery_timeout passes.
  // `step`: the step whose state this task holds in memory; `pending`: see Pending.
  absl::StatusOr<Epoch> Recover(int64_t step, const std::optional<Pending>& pending);
  absl::StatusOr<Epoch> TryRecoverOnce(absl::Time deadline, const std::string& offer);
  absl::Status Checkpoint(int64_t step, const char* why);
  // When each step since the oldest one a recovery may resume from was reached (bounded).
  void Reached(int64_t step);
  // The wall time spent getting from step `to` to step `from` (what resuming at `to` discards).
  absl::Duration WorkSince(int64_t to, int64_t from) const;
  // The job's shutdown barrier, re-entered after the coordinator restarts (Unavailable).
  absl::Status ShutdownBarrier();

  client::CoordinationClient& client() { return *client_.load(); }

  TrainerOptions options_;
  const client::TaskRef task_;
  std::atomic<client::CoordinationClient*> client_{nullptr};
  CheckpointStore store_;
  uint64_t state_ = 0;
  std::map<int64_t, absl::Time> reached_at_;
  bool left_for_preemption_ = false;
  std::shared_ptr<Shared> shared_ = std::make_shared<Shared>();
};

}  // namespace phalanx::examples
