// FakeClock: a Clock that only moves when a test calls Advance(). Waits on it
// (AwaitWithDeadline, SleepFor) end when Advance reaches their deadline, or when their
// condition holds; PendingDeadlines() shows what the code under test is waiting for, so a test
// waits until the code is blocked on the clock instead of sleeping and hoping. Thread-safe.
#pragma once

#include <algorithm>
#include <atomic>
#include <set>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/base/clock.h"
#include "common/testing/eventually.h"

namespace phalanx::testing {

class FakeClock final : public base::Clock {
 public:
  explicit FakeClock(absl::Time start = absl::FromUnixSeconds(1'700'000'000)) : now_(start) {}

  absl::Time Now() const override {
    absl::MutexLock lock(&mu_);
    return now_;
  }

  // Moves time on by `d` and wakes every wait whose deadline that reaches.
  void Advance(absl::Duration d) {
    absl::MutexLock lock(&mu_);
    now_ += d;
    for (Waiter* waiter : waiters_) {
      if (waiter->deadline > now_ || waiter->reached.load()) continue;
      waiter->reached.store(true);
      // Releasing the waiter's mutex makes absl re-evaluate its condition, which now holds.
      // TryLock never blocks, so there is no lock order between this clock and the waiters'
      // mutexes; if another thread holds the mutex, its own release re-evaluates the condition.
      if (waiter->mu->TryLock()) waiter->mu->Unlock();
    }
  }

  bool AwaitWithDeadline(absl::Mutex* mu, const absl::Condition& cond,
                         absl::Time deadline) const override ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    if (cond.Eval()) return true;
    Waiter waiter{mu, deadline};
    {
      absl::MutexLock lock(&mu_);
      if (now_ >= deadline) return false;
      waiters_.insert(&waiter);
    }
    auto ready = [&] { return waiter.reached.load() || cond.Eval(); };
    // Advance's wake-up normally arrives at once; the real-time slice only bounds the cost of
    // one lost to a TryLock that failed while nobody was about to release the mutex.
    while (!ready()) mu->AwaitWithTimeout(absl::Condition(&ready), absl::Milliseconds(50));
    {
      absl::MutexLock lock(&mu_);
      waiters_.erase(&waiter);
    }
    return cond.Eval();
  }

  // The deadlines of the waits now blocked on this clock that it has not reached, earliest
  // first (one entry per waiting thread).
  std::vector<absl::Time> PendingDeadlines() const {
    absl::MutexLock lock(&mu_);
    std::vector<absl::Time> deadlines;
    for (const Waiter* waiter : waiters_) {
      if (!waiter->reached.load()) deadlines.push_back(waiter->deadline);
    }
    std::sort(deadlines.begin(), deadlines.end());
    return deadlines;
  }
  int Waiters() const { return static_cast<int>(PendingDeadlines().size()); }
  // Waits (Eventually: real time, up to `timeout`) until the waits blocked on this clock are
  // exactly `deadlines`, i.e. the code under test has got as far as waiting for them.
  bool WaitForWaiters(std::vector<absl::Time> deadlines,
                      absl::Duration timeout = absl::Seconds(30)) const {
    return Eventually([&] { return PendingDeadlines() == deadlines; }, timeout);
  }

 private:
  struct Waiter {
    absl::Mutex* const mu;
    const absl::Time deadline;
    std::atomic<bool> reached{false};
  };

  mutable absl::Mutex mu_;
  absl::Time now_ ABSL_GUARDED_BY(mu_);
  mutable std::set<Waiter*> waiters_ ABSL_GUARDED_BY(mu_);
};

}  // namespace phalanx::testing
