#include "common/base/clock.h"

#include "absl/time/clock.h"

namespace phalanx::base {

void Clock::SleepFor(absl::Duration d) const {
  if (d <= absl::ZeroDuration()) return;
  static constexpr bool kNever = false;
  absl::Mutex mu;
  absl::MutexLock lock(&mu);
  AwaitWithDeadline(&mu, absl::Condition(&kNever), Now() + d);
}

absl::Time RealClock::Now() const { return absl::Now(); }

bool RealClock::AwaitWithDeadline(absl::Mutex* mu, const absl::Condition& cond,
                                  absl::Time deadline) const {
  return mu->AwaitWithDeadline(cond, deadline);
}

RealClock& RealClock::Get() {
  static RealClock* clock = new RealClock();
  return *clock;
}

}  // namespace phalanx::base
