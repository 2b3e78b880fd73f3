#include "node_agent/preemption/background_source.h"

#include "absl/strings/str_cat.h"

namespace phalanx::agent {

BackgroundSource::BackgroundSource(std::unique_ptr<NoticeSource> source, base::Clock& clock,
                                   absl::Duration period, absl::Duration stale_after)
    : source_(std::move(source)),
      name_(source_->name()),
      clock_(clock),
      period_(period),
      stale_after_(stale_after),
      thread_([this] { Loop(); }) {}

BackgroundSource::~BackgroundSource() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  thread_.join();
}

void BackgroundSource::Loop() {
  absl::MutexLock lock(&mu_);
  while (!stop_) {
    const absl::Time start = clock_.Now();
    running_since_ = start;
    mu_.Unlock();  // the poll does I/O: never under the lock
    absl::StatusOr<std::optional<NodeNotice>> result = source_->Poll(start);
    mu_.Lock();
    running_since_.reset();
    latest_ = std::move(result);
    ++completed_;
    // Next poll one period after this one started (at once if it took longer), or on Stop.
    clock_.AwaitWithDeadline(&mu_, absl::Condition(&stop_), start + period_);
  }
}

absl::StatusOr<std::optional<NodeNotice>> BackgroundSource::Poll(absl::Time now) {
  absl::MutexLock lock(&mu_);
  if (running_since_.has_value() && now - *running_since_ > stale_after_) {
    return absl::DeadlineExceededError(
        absl::StrCat(name_, " has not answered for ", absl::FormatDuration(now - *running_since_)));
  }
  if (!latest_.has_value()) return std::optional<NodeNotice>();
  return *latest_;
}

int BackgroundSource::completed_polls() const {
  absl::MutexLock lock(&mu_);
  return completed_;
}

bool BackgroundSource::in_flight() const {
  absl::MutexLock lock(&mu_);
  return running_since_.has_value();
}

}  // namespace phalanx::agent
