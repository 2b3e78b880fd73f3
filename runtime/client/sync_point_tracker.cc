#include "runtime/client/sync_point_tracker.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace phalanx::client {
namespace {

// The round closed without this task: it was not open (any more), or its deadline passed.
bool RoundClosed(const absl::Status& status) {
  return absl::IsFailedPrecondition(status) || absl::IsDeadlineExceeded(status);
}

}  // namespace

std::optional<int64_t> SyncPointTracker::OnRound(const coord::PreemptionRound& round) {
  if (round.round <= finished_round_) return std::nullopt;
  if (IsOpen(round.round)) {
    open_->info = round;  // the same round again, e.g. with an earlier deadline
    return std::nullopt;
  }
  open_ = OpenRound{round, Phase::kReported, next_unchecked_step_};
  return next_unchecked_step_;
}

void SyncPointTracker::OnEarlyReportAnswer(uint64_t round,
                                           const absl::StatusOr<int64_t>& sync_step) {
  if (!IsOpen(round)) return;  // a newer round took over, or this one is over
  if (sync_step.ok()) {
    open_->phase = Phase::kAgreed;
    open_->agreed_step = *sync_step;
  } else if (RoundClosed(sync_step.status())) {
    Finish(round);  // nothing to sync on any more
  } else if (open_->phase == Phase::kReported) {
    // An agreement the loop's own report already got stands; otherwise the loop reports.
    open_->phase = Phase::kReportFailed;
  }
}

void SyncPointTracker::Reset() {
  open_.reset();
  finished_round_ = 0;
}

SyncPointTracker::Next SyncPointTracker::Check(int64_t step) {
  next_unchecked_step_ = std::max(next_unchecked_step_, step + 1);
  if (!open_.has_value()) return Answer(false);  // the common case: no RPC at all
  if (open_->phase == Phase::kReported) {
    // Below our own report the answer is known: the sync step (the largest report) is later.
    if (step < open_->reported_step) return Answer(false);
    return {Next::Action::kWait, false, open_->info};  // this step may be the sync step
  }
  return AfterWait(step, open_->info.round);
}

bool SyncPointTracker::Settled(uint64_t round) const {
  return !IsOpen(round) || open_->phase != Phase::kReported;
}

SyncPointTracker::Next SyncPointTracker::AfterWait(int64_t step, uint64_t round) {
  if (!IsOpen(round)) return Answer(false);  // the round closed (deadline) while we waited
  if (open_->phase == Phase::kAgreed) return Answer(Decide(step, round, open_->agreed_step));
  // No agreement from the early report (it failed, or is still out): report this step.
  return {Next::Action::kReport, false, open_->info};
}

absl::StatusOr<bool> SyncPointTracker::OnOwnReportAnswer(int64_t step, uint64_t round,
                                                         const absl::StatusOr<int64_t>& sync_step) {
  if (!sync_step.ok()) {
    if (RoundClosed(sync_step.status())) Finish(round);
    return sync_step.status();
  }
  if (IsOpen(round)) {
    open_->phase = Phase::kAgreed;
    open_->agreed_step = *sync_step;
  }
  return Decide(step, round, *sync_step);
}

bool SyncPointTracker::Decide(int64_t step, uint64_t round, int64_t sync_step) {
  if (step < sync_step) return false;
  Finish(round);  // reached (or, if the loop skipped it, passed): the round is over
  return step == sync_step;
}

void SyncPointTracker::Finish(uint64_t round) {
  if (!IsOpen(round)) return;
  finished_round_ = round;
  open_.reset();
}

absl::Duration SyncPointTracker::RoundWait(const coord::PreemptionRound& round) const {
  return std::max(absl::Seconds(1), round.deadline == absl::InfiniteFuture()
                                        ? absl::Minutes(10)
                                        : round.deadline - clock_.Now());
}

SyncPointTracker::Phase SyncPointTracker::phase() const {
  return open_.has_value() ? open_->phase : Phase::kIdle;
}

std::string SyncPointTracker::DebugString() const {
  if (!open_.has_value()) {
    return finished_round_ == 0 ? "IDLE" : absl::StrCat("IDLE after r", finished_round_);
  }
  const uint64_t r = open_->info.round;
  switch (open_->phase) {
    case Phase::kReported:
      return absl::StrCat("REPORTED(r", r, ", s", open_->reported_step, ")");
    case Phase::kReportFailed:
      return absl::StrCat("REPORT_FAILED(r", r, ", s", open_->reported_step, ")");
    case Phase::kAgreed:
      return absl::StrCat("AGREED(r", r, ", k", open_->agreed_step, ")");
    case Phase::kIdle:
      break;
  }
  return "IDLE";
}

}  // namespace phalanx::client
