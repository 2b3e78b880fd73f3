#include "examples/sample_worker/sample_trainer.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "examples/sample_worker/recovery_offer.h"

namespace phalanx::examples {

using client::TaskInfo;
using client::TaskState;

SampleTrainer::SampleTrainer(TrainerOptions options, client::TaskRef task)
    : options_(std::move(options)), task_(task), store_(options_.checkpoint_dir, task.task_id) {}

void SampleTrainer::Event(const client::TaskRef& task, const std::string& kind,
                          const std::string& fields) {
  // One write per line so events from the session thread and the loop never interleave.
  std::string line = absl::StrCat("EVENT t_ms=", absl::ToUnixMillis(absl::Now()),
                                  " task=", task.task_id, " inc=", task.incarnation, " kind=", kind,
                                  fields.empty() ? "" : " ", fields, "\n");
  ssize_t unused = write(STDOUT_FILENO, line.data(), line.size());
  (void)unused;
}

client::ClientCallbacks SampleTrainer::Callbacks() {
  client::ClientCallbacks callbacks;
  std::shared_ptr<Shared> shared = shared_;
  const client::TaskRef me = task_;
  callbacks.on_peer_change = [this, shared, me](const TaskInfo& info) {
    const bool failed = info.state == TaskState::kFailed;
    Event(me, failed ? "peer_failed" : "peer_changed",
          absl::StrCat("peer=", info.task_id, " peer_inc=", info.incarnation, " state=",
                       coord::TaskStateName(info.state), " reason=\"", info.reason, "\""));
    std::string barrier;
    {
      absl::MutexLock lock(&shared->mu);
      ++shared->membership_changes;
      barrier = shared->current_barrier;
    }
    // Release the peers waiting with us in a barrier the dead task will never reach.
    if (failed && !barrier.empty()) client().CancelBarrierAsync(barrier, [](absl::Status) {});
  };
  callbacks.on_reconnect = [shared, me](bool coordinator_restarted) {
    {
      absl::MutexLock lock(&shared->mu);
      ++shared->membership_changes;
    }
    Event(me, "reconnected", absl::StrCat("coordinator_restarted=", coordinator_restarted ? 1 : 0));
  };
  callbacks.on_preemption = [shared, me](const client::PreemptionRound& round) {
    const bool named = std::find(round.affected_tasks.begin(), round.affected_tasks.end(),
                                 me.task_id) != round.affected_tasks.end();
    {
      absl::MutexLock lock(&shared->mu);
      shared->named_in_preemption = named;
    }
    Event(me, "preemption_notice",
          absl::StrCat("round=", round.round, " affects_me=", named ? 1 : 0, " reason=\"",
                       round.reason, "\""));
  };
  callbacks.on_fatal = [me, shared](const absl::Status& status) {
    Event(me, "fatal", absl::StrCat("reason=\"", status.message(), "\""));
    // Aborted: this incarnation is dead to the job; exit 3 so it is restarted with a new one.
    // Anything else (wrong token, wrong job) will not get better with a restart: exit 2.
    // Unless the process was already leaving for a reason of its own (LeaveWith).
    std::fflush(nullptr);
    const int leaving = shared->leaving_code.load();
    _exit(leaving != 0 ? leaving : absl::IsAborted(status) ? 3 : 2);
  };
  return callbacks;
}

uint64_t SampleTrainer::MembershipChanges() {
  absl::MutexLock lock(&shared_->mu);
  return shared_->membership_changes;
}

absl::Status SampleTrainer::AwaitBarrier(const std::string& id, absl::Duration timeout,
                                         uint64_t seen, bool* arrived) {
  auto result = std::make_shared<std::optional<absl::Status>>();
  std::shared_ptr<Shared> shared = shared_;
  {
    absl::MutexLock lock(&shared->mu);
    if (shared->membership_changes != seen) {
      return absl::CancelledError("membership changed before the barrier");
    }
    shared->current_barrier = id;
  }
  if (arrived != nullptr) *arrived = true;
  client().BarrierAsync(id, timeout, {}, [shared, result](absl::Status status) {
    absl::MutexLock lock(&shared->mu);
    *result = std::move(status);
  });
  absl::MutexLock lock(&shared->mu);
  auto done = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(shared->mu) {
    return result->has_value() || shared->membership_changes != seen;
  };
  // The RPC's own deadline ends it by timeout + margin; this bound is only a backstop.
  shared->mu.AwaitWithTimeout(absl::Condition(&done), timeout + absl::Seconds(10));
  shared->current_barrier.clear();
  if (result->has_value()) return **result;
  if (shared->membership_changes != seen) {
    return absl::CancelledError("membership changed while waiting");
  }
  return absl::DeadlineExceededError(absl::StrCat("barrier '", id, "' did not answer"));
}

absl::Status SampleTrainer::Checkpoint(int64_t step, const char* why) {
  absl::Status status = store_.Save(step, state_);
  if (status.ok()) {
    Event(task_, "checkpoint", absl::StrCat("step=", step, " why=", why));
  }
  return status;
}

void SampleTrainer::Reached(int64_t step) {
  reached_at_.erase(reached_at_.upper_bound(step), reached_at_.end());  // after a rollback
  reached_at_[step] = absl::Now();
  // A recovery resumes from a checkpoint every task has: a few intervals back at most.
  constexpr size_t kKept = 1024;
  while (reached_at_.size() > kKept) reached_at_.erase(reached_at_.begin());
}

absl::Duration SampleTrainer::WorkSince(int64_t to, int64_t from) const {
  auto end = reached_at_.find(from);
  auto begin = reached_at_.lower_bound(to);  // the earliest known when `to` is older
  if (end == reached_at_.end() || begin == reached_at_.end() || begin->first >= from) {
    return absl::ZeroDuration();
  }
  return end->second - begin->second;
}

absl::StatusOr<SampleTrainer::Epoch> SampleTrainer::TryRecoverOnce(absl::Time deadline,
                                                                   const std::string& offer) {
  if (absl::Status s = client().WaitUntilConnected(deadline - absl::Now()); !s.ok()) return s;
  const uint64_t seen = MembershipChanges();  // before the snapshot the epoch is built from
  absl::StatusOr<client::JobSnapshot> job = client().WatchJobState(0, absl::Seconds(1));
  if (!job.ok()) return job.status();
  while (!std::all_of(job->tasks.begin(), job->tasks.end(),
                      [](const TaskInfo& t) { return t.state == TaskState::kConnected; })) {
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError("not every task came back in time");
    }
    job = client().WatchJobState(job->version, std::min(absl::Seconds(5), deadline - absl::Now()));
    if (!job.ok()) return job.status();
  }
  std::vector<base::Incarnation> incarnations;
  for (const TaskInfo& t : job->tasks) incarnations.push_back(t.incarnation);
  const std::string epoch =
      absl::StrFormat("e%016x", std::hash<std::string>{}(absl::StrCat(
                                    job->coordinator_id, ":", absl::StrJoin(incarnations, "."))));
  const client::TaskRef me = task_;
  if (absl::Status s =
          client().KvInsert(absl::StrCat("recovery/", epoch, "/", me.task_id), offer, true);
      !s.ok()) {
    return s;
  }
  const std::string barrier = absl::StrCat("recovery/", epoch);
  absl::Status passed =
      AwaitBarrier(barrier, std::min(options_.barrier_timeout, deadline - absl::Now()), seen);
  if (!passed.ok()) return passed;
  auto published = client().KvGetDir(barrier);
  if (!published.ok()) return published.status();
  if (static_cast<int>(published->size()) != client().num_tasks()) {
    return absl::UnavailableError("recovery state incomplete (coordinator restarted?)");
  }
  std::vector<RecoveryOffer> offers;
  for (const auto& [key, value] : *published) {
    absl::StatusOr<RecoveryOffer> parsed = ParseOffer(value);
    if (!parsed.ok()) {
      // A peer of another build or a stray writer: retrying would read the same entry again.
      return absl::FailedPreconditionError(absl::StrCat(key, ": ", parsed.status().message()));
    }
    offers.push_back(*std::move(parsed));
  }
  return Epoch{epoch, AgreeResumeStep(offers), seen};
}

absl::Status SampleTrainer::ShutdownBarrier() {
  const absl::Time deadline = absl::Now() + options_.recovery_timeout;
  while (true) {
    absl::Status status = client().Shutdown(std::max(absl::Seconds(1), deadline - absl::Now()));
    // Unavailable: the coordinator went away mid-barrier; its successor runs a fresh one that
    // every task re-enters once it has re-registered.
    if (!absl::IsUnavailable(status) || absl::Now() >= deadline) return status;
    Event(task_, "shutdown_retry", absl::StrCat("reason=\"", status.message(), "\""));
    if (absl::Status s = client().WaitUntilConnected(deadline - absl::Now()); !s.ok()) return s;
  }
}

absl::StatusOr<SampleTrainer::Epoch> SampleTrainer::Recover(int64_t step,
                                                            const std::optional<Pending>& pending) {
  RecoveryOffer mine;
  mine.held.insert(0);
  for (int64_t kept : store_.Kept()) mine.held.insert(kept);
  mine.held.insert(step);
  if (pending.has_value()) mine.pending = pending->step;
  const std::string offer = FormatOffer(mine);
  const absl::Time deadline = absl::Now() + options_.recovery_timeout;
  while (true) {
    absl::StatusOr<Epoch> epoch = TryRecoverOnce(deadline, offer);
    if (epoch.ok() || absl::IsAborted(epoch.status()) ||
        absl::IsFailedPrecondition(epoch.status()) || absl::Now() >= deadline) {
      return epoch;
    }
    Event(task_, "recovery_retry", absl::StrCat("reason=\"", epoch.status().message(), "\""));
    if (absl::IsUnavailable(epoch.status())) {
      // The coordinator is unreachable: give the client's reconnect a moment, not a spin.
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
}

absl::Status SampleTrainer::Run(client::CoordinationClient& coordination) {
  client_.store(&coordination);
  const client::TaskRef me = task_;
  if (absl::Status s = client().Connect(options_.connect_timeout); !s.ok()) return s;
  Event(me, "connected");
  std::this_thread::sleep_for(absl::ToChronoNanoseconds(options_.load_time));  // "loading"

  absl::StatusOr<Epoch> epoch = Recover(0, std::nullopt);
  if (!epoch.ok()) return epoch.status();
  uint64_t seen_changes = epoch->changes_seen;
  int64_t step = epoch->resume_step;
  if (step > 0) {
    absl::StatusOr<uint64_t> state = store_.Load(step);
    if (!state.ok()) return state.status();
    state_ = *state;
  }
  Event(me, "start", absl::StrCat("resume_step=", step, " epoch=", epoch->id));
  Reached(step);

  bool barrier_failed = false;
  bool coordinator_lost = false;
  bool stepping_reported = false;  // this process's first ReportStepping was delivered
  std::optional<Pending> pending;  // set by a step barrier that ended unanswered
  while (step < options_.steps) {
    // The sync point before a membership change: the task a round names checkpoints at the
    // agreed step and leaves at once, so its failure may reach us after we passed the step's
    // previous barrier but before we got here. The state at `step` is complete (every task
    // passed that barrier), so checkpoint it first; recovery then resumes from it, and the
    // step is checked again after recovery (the tracker answers false once it was reached).
    absl::StatusOr<bool> sync = client().ReachedSyncPoint(step);
    if (!sync.ok()) {
      Event(me, "sync_failed", absl::StrCat("reason=\"", sync.status().message(), "\""));
    } else if (*sync) {
      if (absl::Status s = Checkpoint(step, "preemption"); !s.ok()) return s;
      Event(me, "sync_checkpoint", absl::StrCat("step=", step));
      bool named;
      {
        absl::MutexLock lock(&shared_->mu);
        named = shared_->named_in_preemption;
      }
      if (named) {
        // This task's node is going away: leave now rather than train steps that its
        // eviction would throw away. The operator moves it; its peers wait at this step.
        Event(me, "left_for_preemption", absl::StrCat("step=", step));
        left_for_preemption_ = true;
        return absl::OkStatus();
      }
    }

    if (barrier_failed || coordinator_lost || MembershipChanges() != seen_changes) {
      absl::StatusOr<Epoch> next = Recover(step, pending);
      if (!next.ok()) return next.status();
      seen_changes = next->changes_seen;
      if (next->id == epoch->id) {
        if (barrier_failed) {
          // Same membership, yet the step barrier failed (a straggler timed out): treat it as
          // a collective timeout, which real training cannot survive in place either.
          const std::string message = absl::StrCat("step ", step, " barrier failed twice");
          (void)client().ReportError(message);
          return absl::InternalError(message);
        }
      } else {
        const absl::Duration discarded = WorkSince(next->resume_step, step);
        Event(me, "recovered",
              absl::StrCat("from_step=", step, " resume_step=", next->resume_step, " lost=",
                           std::max<int64_t>(0, step - next->resume_step), " epoch=", next->id,
                           " rolled_back_ms=", absl::ToInt64Milliseconds(discarded)));
        if (discarded > absl::ZeroDuration()) {
          // For goodput only: a coordinator that cannot take it must not stop training.
          if (absl::Status s = client().ReportRolledBack(next->id, discarded); !s.ok()) {
            Event(me, "rolled_back_report_failed", absl::StrCat("reason=\"", s.message(), "\""));
          }
        }
        if (pending.has_value() && next->resume_step == pending->step) {
          // A peer reached this step, so the barrier before it was released: keep its state.
          state_ = pending->state;
          if (absl::Status s = Checkpoint(pending->step, "released"); !s.ok()) return s;
        } else if (next->resume_step != step) {
          absl::StatusOr<uint64_t> state =
              next->resume_step > 0 ? store_.Load(next->resume_step) : absl::StatusOr<uint64_t>(0);
          if (!state.ok()) return state.status();
          state_ = *state;
        }
        step = next->resume_step;
        Reached(step);
        epoch = next;
      }
      barrier_failed = false;
      coordinator_lost = false;
      pending.reset();
      continue;
    }

    std::this_thread::sleep_for(absl::ToChronoNanoseconds(options_.step_time));  // "compute"
    const uint64_t next_state = AdvanceState(state_, step);
    const std::string barrier = absl::StrCat(epoch->id, "/step-", step);
    bool arrived = false;
    absl::Status passed = AwaitBarrier(barrier, options_.barrier_timeout, seen_changes, &arrived);
    if (!passed.ok()) {
      if (arrived) pending = Pending{step + 1, next_state};
      Event(me, "barrier_failed",
            absl::StrCat("step=", step, " code=", absl::StatusCodeToString(passed.code()),
                         " reason=\"", passed.message(), "\""));
      if (absl::IsAborted(passed)) return passed;
      if (absl::IsUnavailable(passed)) {
        // The coordinator stopped, moved or restarted: never a reason to fail. Recovery waits
        // for the client to re-register with it and agrees on the step again (its barriers
        // and key-value data may be gone).
        coordinator_lost = true;
        continue;
      }
      // A membership change is handled by recovery at the top of the loop; only a failure
      // with the membership unchanged (a timeout) counts against the barrier.
      barrier_failed = MembershipChanges() == seen_changes;
      continue;
    }
    state_ = next_state;
    ++step;
    Reached(step);
    // For the operator's goodput: the first step, or a regroup's end (once per registration;
    // later calls are a flag check). Best effort: an undelivered report is sent after the next.
    // The event marks when this process's first report had reached the coordinator.
    if (client().ReportStepping().ok() && !stepping_reported) {
      stepping_reported = true;
      Event(me, "first_step_reported", absl::StrCat("step=", step));
    }
    if (step % options_.checkpoint_every == 0 || step == options_.steps) {
      if (absl::Status s = Checkpoint(step, "periodic"); !s.ok()) return s;
    }
  }
  if (absl::Status s = ShutdownBarrier(); !s.ok()) return s;
  Event(me, "done", absl::StrFormat("steps=%d state=%016x", step, state_));
  return absl::OkStatus();
}

}  // namespace phalanx::examples
