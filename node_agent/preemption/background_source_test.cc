// BackgroundSource: the wrapped source polls on its own thread; Poll answers at once with the
// latest result, even while a poll hangs on an unresponsive metadata server, and reports a poll
// that has run too long.
#include "node_agent/preemption/background_source.h"

#include <memory>

#include "common/testing/eventually.h"
#include "common/testing/fake_clock.h"
#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "node_agent/preemption/fake_metadata_server.h"
#include "node_agent/preemption/gce_metadata_source.h"

namespace phalanx::agent {
namespace {

using ::phalanx::agent::testing::FakeMetadataServer;
using ::phalanx::agent::testing::ScriptedResponse;
using ::phalanx::testing::Eventually;
using ::phalanx::testing::StatusIs;

constexpr char kGcePreemptedPath[] = "/computeMetadata/v1/instance/preempted";
constexpr char kGceMaintenancePath[] = "/computeMetadata/v1/instance/maintenance-event";

std::unique_ptr<NoticeSource> Gce(const FakeMetadataServer& server, absl::Duration timeout) {
  GceMetadataOptions options;
  options.base_url = server.base_url();
  options.request_timeout = timeout;
  return *GceMetadataSource::Create(options);
}

TEST(BackgroundSourceTest, AHangingServerDoesNotHoldUpPoll) {
  phalanx::testing::FakeClock clock;
  std::unique_ptr<BackgroundSource> background;  // destroyed after the server, which ends the
                                                 // hanging request its thread is in
  auto server = *FakeMetadataServer::Start();
  // Answers after an hour (the server's destructor cuts it short); the source would wait 10 min.
  server->Set("GET", kGcePreemptedPath, ScriptedResponse::Ok("FALSE").After(absl::Hours(1)));
  background = std::make_unique<BackgroundSource>(Gce(*server, absl::Minutes(10)), clock,
                                                  absl::Seconds(1), absl::Seconds(10));
  BackgroundSource& source = *background;
  ASSERT_TRUE(Eventually([&] { return server->CountOf("GET", kGcePreemptedPath) == 1; },
                         absl::Seconds(30)));
  ASSERT_TRUE(source.in_flight());
  // Nothing known yet, answered at once while the poll hangs.
  absl::StatusOr<std::optional<NodeNotice>> polled = source.Poll(clock.Now());
  ASSERT_TRUE(polled.ok()) << polled.status();
  EXPECT_EQ(*polled, std::nullopt);
  EXPECT_FALSE(source.answered());  // that nullopt is "nothing known", not "no notice"
  EXPECT_TRUE(source.in_flight());
  // Hanging past stale_after is an error the agent counts and logs.
  clock.Advance(absl::Seconds(11));
  EXPECT_THAT(source.Poll(clock.Now()),
              StatusIs(absl::StatusCode::kDeadlineExceeded, ::testing::HasSubstr("gce-metadata")));
  EXPECT_EQ(source.completed_polls(), 0);
}

TEST(BackgroundSourceTest, PollsOnItsOwnScheduleAndPassesResultsThrough) {
  auto server = *FakeMetadataServer::Start();
  server->Set("GET", kGcePreemptedPath, ScriptedResponse::Ok("TRUE"));
  server->Set("GET", kGceMaintenancePath, ScriptedResponse::Ok("NONE"));
  phalanx::testing::FakeClock clock;
  BackgroundSource source(Gce(*server, absl::Seconds(30)), clock, absl::Seconds(1),
                          absl::Seconds(10));
  ASSERT_TRUE(Eventually([&] { return source.completed_polls() == 1; }, absl::Seconds(30)));
  EXPECT_TRUE(source.answered());
  absl::StatusOr<std::optional<NodeNotice>> polled = source.Poll(clock.Now());
  ASSERT_TRUE(polled.ok() && polled->has_value());
  EXPECT_EQ((*polled)->kind, kPreemptionNotice);
  // The next poll waits for the source's own period on the clock.
  ASSERT_TRUE(clock.WaitForWaiters({clock.Now() + absl::Seconds(1)}));
  server->Set("GET", kGcePreemptedPath, ScriptedResponse::Status(500, "oops"));
  clock.Advance(absl::Seconds(1));
  ASSERT_TRUE(Eventually([&] { return source.completed_polls() == 2; }, absl::Seconds(30)));
  EXPECT_THAT(source.Poll(clock.Now()), StatusIs(absl::StatusCode::kUnavailable));
}

}  // namespace
}  // namespace phalanx::agent
