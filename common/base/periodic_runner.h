// PeriodicRunner: calls `tick(now)` on its own thread every `period` until destroyed; with
// FirstTick::kAtOnce also once as soon as the thread starts (a report that must not wait a period).
// Production code drives time-based logic (`CheckStaleness(now)`, deadline expiry) with it;
// tests call the same tick functions directly with a FakeClock instead.
// Thread-safe: Stop() may be called from any thread except the tick itself.
#pragma once

#include <functional>
#include <string>
#include <thread>

#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "common/base/clock.h"

namespace phalanx::base {

enum class FirstTick { kAfterOnePeriod, kAtOnce };

class PeriodicRunner {
 public:
  PeriodicRunner(Clock& clock, absl::Duration period, std::function<void(absl::Time)> tick,
                 FirstTick first = FirstTick::kAfterOnePeriod);
  ~PeriodicRunner();
  PeriodicRunner(const PeriodicRunner&) = delete;
  PeriodicRunner& operator=(const PeriodicRunner&) = delete;

  // Stops the thread; waits for an in-flight tick to finish. Idempotent.
  void Stop();

 private:
  void Loop();

  Clock& clock_;
  const absl::Duration period_;
  std::function<void(absl::Time)> tick_;
  const FirstTick first_;
  absl::Notification stop_;
  std::thread thread_;
};

}  // namespace phalanx::base
