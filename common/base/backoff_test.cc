#include "common/base/backoff.h"

#include "gtest/gtest.h"

namespace phalanx::base {
namespace {

TEST(ExponentialBackoff, DelaysGrowAndStayWithinJitterBounds) {
  ExponentialBackoff backoff(absl::Milliseconds(100), absl::Seconds(1));
  absl::Duration nominal = absl::Milliseconds(100);
  for (int i = 0; i < 8; ++i) {
    SCOPED_TRACE(i);
    const absl::Duration d = backoff.NextDelay();
    EXPECT_GE(d, nominal / 2);
    EXPECT_LE(d, nominal);
    nominal = std::min(absl::Seconds(1), nominal * 2);
  }
  EXPECT_EQ(backoff.attempts(), 8);
}

TEST(ExponentialBackoff, ResetStartsOverFromInitial) {
  ExponentialBackoff backoff(absl::Milliseconds(100), absl::Seconds(10));
  for (int i = 0; i < 5; ++i) backoff.NextDelay();
  backoff.Reset();
  EXPECT_LE(backoff.NextDelay(), absl::Milliseconds(100));
  EXPECT_EQ(backoff.attempts(), 1);
}

TEST(ExponentialBackoff, DifferentSeedsSpreadClients) {
  ExponentialBackoff a(absl::Seconds(1), absl::Seconds(1), 2.0, 1);
  ExponentialBackoff b(absl::Seconds(1), absl::Seconds(1), 2.0, 2);
  EXPECT_NE(a.NextDelay(), b.NextDelay());
}

}  // namespace
}  // namespace phalanx::base
