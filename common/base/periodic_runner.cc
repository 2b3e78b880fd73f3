#include "common/base/periodic_runner.h"

namespace phalanx::base {

PeriodicRunner::PeriodicRunner(Clock& clock, absl::Duration period,
                               std::function<void(absl::Time)> tick, FirstTick first)
    : clock_(clock), period_(period), tick_(std::move(tick)), first_(first), thread_([this] {
        Loop();
      }) {}

PeriodicRunner::~PeriodicRunner() { Stop(); }

void PeriodicRunner::Stop() {
  if (!stop_.HasBeenNotified()) stop_.Notify();
  if (thread_.joinable()) thread_.join();
}

void PeriodicRunner::Loop() {
  if (first_ == FirstTick::kAtOnce && !stop_.HasBeenNotified()) tick_(clock_.Now());
  // Waiting on the stop notification (not sleeping) lets Stop() end the thread at once.
  while (!stop_.WaitForNotificationWithTimeout(period_)) {
    tick_(clock_.Now());
  }
}

}  // namespace phalanx::base
