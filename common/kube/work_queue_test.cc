#include "common/kube/work_queue.h"

#include <thread>

#include "common/kube/token_bucket.h"
#include "common/testing/fake_clock.h"
#include "gtest/gtest.h"

namespace phalanx::kube {
namespace {

TEST(WorkQueue, DuplicateAdds_Collapse) {
  testing::FakeClock clock;
  WorkQueue queue(clock);
  queue.Add("ns/a");
  queue.Add("ns/a");
  queue.Add("ns/b");
  EXPECT_EQ(queue.Len(), 2);
  EXPECT_EQ(queue.TryGet(), "ns/a");
  EXPECT_EQ(queue.TryGet(), "ns/b");
  EXPECT_EQ(queue.TryGet(), std::nullopt);
}

TEST(WorkQueue, KeyBeingProcessed_IsNotHandedOutTwice_ButRequeuedAtDone) {
  testing::FakeClock clock;
  WorkQueue queue(clock);
  queue.Add("k");
  ASSERT_EQ(queue.TryGet(), "k");
  queue.Add("k");  // an event while a worker reconciles it
  EXPECT_EQ(queue.TryGet(), std::nullopt) << "one worker per key at a time";
  queue.Done("k");
  EXPECT_EQ(queue.TryGet(), "k") << "the change seen meanwhile must be reconciled";
  queue.Done("k");
  EXPECT_EQ(queue.TryGet(), std::nullopt);
}

TEST(WorkQueue, AddAfter_WaitsOnTheInjectedClock) {
  testing::FakeClock clock;
  WorkQueue queue(clock);
  queue.AddAfter("k", absl::Seconds(10));
  EXPECT_EQ(queue.TryGet(), std::nullopt);
  clock.Advance(absl::Seconds(9));
  EXPECT_EQ(queue.TryGet(), std::nullopt);
  clock.Advance(absl::Seconds(1));
  EXPECT_EQ(queue.TryGet(), "k");
}

TEST(WorkQueue, RateLimited_BacksOffExponentiallyPerKey_AndForgetResets) {
  testing::FakeClock clock;
  WorkQueue queue(clock, {absl::Milliseconds(100), absl::Seconds(1)});
  const absl::Duration expected[] = {absl::Milliseconds(100), absl::Milliseconds(200),
                                     absl::Milliseconds(400), absl::Milliseconds(800),
                                     absl::Seconds(1),        absl::Seconds(1)};
  for (absl::Duration delay : expected) {
    SCOPED_TRACE(absl::FormatDuration(delay));
    queue.AddRateLimited("k");
    clock.Advance(delay - absl::Milliseconds(1));
    EXPECT_EQ(queue.TryGet(), std::nullopt);
    clock.Advance(absl::Milliseconds(1));
    ASSERT_EQ(queue.TryGet(), "k");
    queue.Done("k");
  }
  EXPECT_EQ(queue.Failures("k"), 6);
  queue.Forget("k");
  EXPECT_EQ(queue.Failures("k"), 0);
  queue.AddRateLimited("other");
  EXPECT_EQ(queue.Failures("other"), 1) << "backoff is per key";
}

TEST(WorkQueue, Get_WaitsOnTheInjectedClock_UntilADelayedKeyIsDue) {
  testing::FakeClock clock;
  WorkQueue queue(clock);
  const absl::Time start = clock.Now();
  queue.AddAfter("k", absl::Seconds(10));
  std::optional<std::string> got;
  std::thread getter([&] { got = queue.Get(absl::Hours(1)); });
  // The getter is blocked on the fake clock until exactly when the key is due.
  ASSERT_TRUE(clock.WaitForWaiters({start + absl::Seconds(10)}));
  clock.Advance(absl::Seconds(10));
  getter.join();
  EXPECT_EQ(got, "k");
}

TEST(WorkQueue, Get_TimesOutOnTheInjectedClock) {
  testing::FakeClock clock;
  WorkQueue queue(clock);
  const absl::Time start = clock.Now();
  std::optional<std::string> got = "unset";
  std::thread getter([&] { got = queue.Get(absl::Seconds(5)); });
  ASSERT_TRUE(clock.WaitForWaiters({start + absl::Seconds(5)}));
  clock.Advance(absl::Seconds(5));
  getter.join();
  EXPECT_EQ(got, std::nullopt);
}

TEST(WorkQueue, ShutDown_WakesABlockedGet) {
  WorkQueue queue(base::RealClock::Get());
  std::thread stopper([&] { queue.ShutDown(); });
  EXPECT_EQ(queue.Get(absl::Seconds(30)), std::nullopt);
  stopper.join();
  queue.Add("late");
  EXPECT_EQ(queue.Len(), 0);
}

TEST(WorkQueue, Get_ReturnsAKeyAddedByAnotherThread) {
  WorkQueue queue(base::RealClock::Get());
  std::thread adder([&] { queue.Add("k"); });
  EXPECT_EQ(queue.Get(absl::Seconds(30)), "k");
  adder.join();
}

TEST(TokenBucket, BurstThenSpacedAtQps) {
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  TokenBucket bucket(10, 3, t0);
  EXPECT_EQ(bucket.Reserve(t0), absl::ZeroDuration());
  EXPECT_EQ(bucket.Reserve(t0), absl::ZeroDuration());
  EXPECT_EQ(bucket.Reserve(t0), absl::ZeroDuration());
  EXPECT_EQ(bucket.Reserve(t0), absl::Milliseconds(100));
  EXPECT_EQ(bucket.Reserve(t0), absl::Milliseconds(200));
  // After a second the bucket is full again (capped at the burst).
  EXPECT_EQ(bucket.Reserve(t0 + absl::Seconds(10)), absl::ZeroDuration());
}

TEST(TokenBucket, NonPositiveQps_IsUnlimited) {
  TokenBucket bucket(0, 1, absl::UnixEpoch());
  for (int i = 0; i < 100; ++i) EXPECT_EQ(bucket.Reserve(absl::UnixEpoch()), absl::ZeroDuration());
}

}  // namespace
}  // namespace phalanx::kube
