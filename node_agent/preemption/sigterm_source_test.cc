#include "node_agent/preemption/sigterm_source.h"

#include <optional>
#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "node_agent/preemption/notice_source_testing.h"

namespace phalanx::agent {
namespace {

using ::phalanx::agent::testing::PollOrFail;
using ::testing::Optional;

const absl::Time kSigtermNow = absl::FromUnixSeconds(1'700'000'000);

TEST(SigtermSourceTest, NoSignal_IsNoNotice) {
  SigtermSource source;
  EXPECT_FALSE(source.triggered());
  EXPECT_EQ(PollOrFail(source, kSigtermNow), std::nullopt);
  EXPECT_EQ(source.name(), "sigterm");
}

TEST(SigtermSourceTest, Signal_IsPreemptionNoticeGraceAfterTheFirstPollThatSawIt) {
  SigtermSource source(absl::Seconds(45));
  // The signal thread is another thread.
  std::thread([&source] { source.Trigger(); }).join();
  EXPECT_TRUE(source.triggered());
  const NodeNotice want{"sigterm", "preemption", "agent received SIGTERM (node shutting down)",
                        kSigtermNow + absl::Seconds(45)};
  EXPECT_THAT(PollOrFail(source, kSigtermNow), Optional(want));
  source.Trigger();  // a second SIGTERM changes nothing
  EXPECT_THAT(PollOrFail(source, kSigtermNow + absl::Seconds(3)), Optional(want));
}

TEST(SigtermSourceTest, DefaultGrace_IsThirtySeconds) {
  SigtermSource source;
  source.Trigger();
  const std::optional<NodeNotice> notice = PollOrFail(source, kSigtermNow);
  ASSERT_TRUE(notice.has_value());
  EXPECT_EQ(notice->deadline, kSigtermNow + absl::Seconds(30));
}

}  // namespace
}  // namespace phalanx::agent
