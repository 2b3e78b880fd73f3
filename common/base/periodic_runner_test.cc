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

}  // namespace
}  // namespace phalanx::base
