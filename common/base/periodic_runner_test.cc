#include "common/base/periodic_runner.h"

#include <atomic>

#include "common/testing/eventually.h"
#include "gtest/gtest.h"

namespace phalanx::base {
namespace {

TEST(PeriodicRunner, TicksUntilStoppedAndStopIsIdempotent) {
  std::atomic<int> ticks{0};
  PeriodicRunner runner(RealClock::Get(), absl::Milliseconds(1), [&](absl::Time) { ++ticks; });
  EXPECT_TRUE(testing::Eventually([&] { return ticks.load() >= 3; }, absl::Seconds(10)));
  runner.Stop();
  const int after_stop = ticks.load();
  runner.Stop();
  EXPECT_EQ(ticks.load(), after_stop);
}

// With a period far longer than the test, only the first tick can have happened: kAtOnce makes
// it happen without waiting a period, the default waits.
TEST(PeriodicRunner, AtOnceTicksWhenItStarts_TheDefaultWaitsAPeriod) {
  std::atomic<int> at_once{0};
  std::atomic<int> waiting{0};
  PeriodicRunner first(
      RealClock::Get(), absl::Hours(1), [&](absl::Time) { ++at_once; }, FirstTick::kAtOnce);
  PeriodicRunner second(RealClock::Get(), absl::Hours(1), [&](absl::Time) { ++waiting; });
  EXPECT_TRUE(testing::Eventually([&] { return at_once.load() == 1; }, absl::Seconds(10)));
  first.Stop();
  second.Stop();
  EXPECT_EQ(at_once.load(), 1);
  EXPECT_EQ(waiting.load(), 0);
}

}  // namespace
}  // namespace phalanx::base
