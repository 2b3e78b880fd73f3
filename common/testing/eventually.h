// Eventually(predicate, timeout): the one bounded wait that tier-3/4 tests (real gRPC, real
// processes) may use. Returns true as soon as `predicate` holds, false once `timeout` of real
// time has passed. Polls after 10 ms, then backs off by half each time up to every 100 ms: a
// quick condition is still seen within milliseconds, and a long wait whose predicate asks an API
// server (a GET through TLS, admission, audit) no longer sends it a hundred requests a second
// (one operator end-to-end case's own polling was ~50 requests/s of the real kube-apiserver's
// load before).
#pragma once

#include <algorithm>
#include <chrono>
#include <functional>
#include <thread>

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace phalanx::testing {

inline bool Eventually(const std::function<bool()>& predicate, absl::Duration timeout,
                       absl::Duration max_interval = absl::Milliseconds(100)) {
  const absl::Time deadline = absl::Now() + timeout;
  absl::Duration interval = std::min(absl::Milliseconds(10), max_interval);
  while (true) {
    if (predicate()) return true;
    const absl::Time now = absl::Now();
    if (now >= deadline) return false;
    // Never sleep past the deadline: the last look is at it, not after it.
    absl::SleepFor(std::min(interval, deadline - now));
    interval = std::min(interval * 3 / 2, max_interval);
  }
}

}  // namespace phalanx::testing
