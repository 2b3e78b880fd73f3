// Eventually(predicate, timeout): the one bounded wait that tier-3/4 tests (real gRPC, real
// processes) may use. Polls `predicate` every 10 ms; returns true as soon as it holds, false
// once `timeout` of real time has passed.
#pragma once

#include <chrono>
#include <functional>
#include <thread>

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace phalanx::testing {

inline bool Eventually(const std::function<bool()>& predicate, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    if (predicate()) return true;
    if (absl::Now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

}  // namespace phalanx::testing
