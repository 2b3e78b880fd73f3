#include "common/base/periodic_runner.h"

namespace phalanx::base {

PeriodicRunner::PeriodicRunner(Clock& clock, absl::Duration period,
                               std::function<void(absl::Time)> tick)
    : clock_(clock), period_(period), tick_(std::move(tick)), thread_([this] { Loop(); }) {}

PeriodicRunner::~PeriodicRunner() { Stop(); }

void PeriodicRunner::Stop() {
  if (!stop_.HasBeenNotified()) stop_.Notify();
  if (thread_.joinable()) thread_.join();
}

void PeriodicRunner::Loop() {
  // Waiting on the stop notification (not sleeping) lets Stop() end the thread at once.
  while (!stop_.WaitForNotificationWithTimeout(period_)) {
    tick_(clock_.Now());
  }
}

}  // namespace phalanx::base
