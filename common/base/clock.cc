#include "common/base/clock.h"

#include "absl/time/clock.h"

namespace phalanx::base {

absl::Time RealClock::Now() const { return absl::Now(); }

RealClock& RealClock::Get() {
  static RealClock* clock = new RealClock();
  return *clock;
}

}  // namespace phalanx::base
