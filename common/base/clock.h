// Clock: the one source of time for library code, so tests can drive time with FakeClock
// (common/testing/fake_clock.h). It reads the time and waits for it: a wait on the clock ends
// when the clock reaches a deadline, so under FakeClock it ends when a test Advance()s past it,
// never on real time. Thread-safe.
#pragma once

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace phalanx::base {

class Clock {
 public:
  virtual ~Clock() = default;
  virtual absl::Time Now() const = 0;

  // With `mu` held on entry and on return (as absl::Mutex::AwaitWithDeadline): waits until
  // `cond` holds or this clock reaches `deadline`; returns whether `cond` holds. `cond` must
  // be a function of state guarded by `mu` (it is re-evaluated whenever `mu` is released), and
  // must not call into this clock.
  virtual bool AwaitWithDeadline(absl::Mutex* mu, const absl::Condition& cond,
                                 absl::Time deadline) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) = 0;

  // Blocks the calling thread until this clock has moved on by `d`. For the few places that
  // must pace themselves (a client-side rate limit); anything that can be woken early waits
  // with AwaitWithDeadline instead.
  void SleepFor(absl::Duration d) const;
};

// Wall-clock time (absl::Now()). Stateless; one shared instance is fine.
class RealClock final : public Clock {
 public:
  absl::Time Now() const override;
  bool AwaitWithDeadline(absl::Mutex* mu, const absl::Condition& cond,
                         absl::Time deadline) const override ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  static RealClock& Get();
};

}  // namespace phalanx::base
