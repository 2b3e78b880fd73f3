// Clock: the one source of time for library code, so tests can drive time with FakeClock
// (common/testing/fake_clock.h). Thread-safe.
#pragma once

#include "absl/time/time.h"

namespace phalanx::base {

class Clock {
 public:
  virtual ~Clock() = default;
  virtual absl::Time Now() const = 0;
};

// Wall-clock time (absl::Now()). Stateless; one shared instance is fine.
class RealClock final : public Clock {
 public:
  absl::Time Now() const override;
  static RealClock& Get();
};

}  // namespace phalanx::base
