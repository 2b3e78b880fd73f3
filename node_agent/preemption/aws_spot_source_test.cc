#include "node_agent/preemption/aws_spot_source.h"

#include <memory>
#include <optional>
#include <string>

#include "absl/time/clock.h"
#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "node_agent/preemption/fake_metadata_server.h"
#include "node_agent/preemption/notice_source_testing.h"

namespace phalanx::agent {
namespace {

using ::phalanx::agent::testing::FakeMetadataServer;
using ::phalanx::agent::testing::PollOrFail;
using ::phalanx::agent::testing::ScriptedResponse;
using ::phalanx::testing::IsOk;
using ::phalanx::testing::StatusIs;
using ::testing::HasSubstr;
using ::testing::Optional;

constexpr char kToken[] = "/latest/api/token";
constexpr char kAction[] = "/latest/meta-data/spot/instance-action";
constexpr char kEvents[] = "/latest/meta-data/events/maintenance/scheduled";
const absl::Time kAwsNow = absl::FromUnixSeconds(1'700'000'000);

absl::Time Utc(int y, int mo, int d, int h, int mi, int s) {
  return absl::FromCivil(absl::CivilSecond(y, mo, d, h, mi, s), absl::UTCTimeZone());
}

class AwsSpotSourceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<FakeMetadataServer>> server = FakeMetadataServer::Start();
    ASSERT_THAT(server, IsOk());
    server_ = std::move(*server);
    source_ = MakeSource({});
    ASSERT_NE(source_, nullptr);
    server_->Set("PUT", kToken, ScriptedResponse::Ok("token-1"));
    server_->Set("GET", kEvents, ScriptedResponse::Ok("[]"));
  }

  std::unique_ptr<AwsSpotSource> MakeSource(AwsSpotOptions options) {
    options.base_url = server_->base_url();
    absl::StatusOr<std::unique_ptr<AwsSpotSource>> source = AwsSpotSource::Create(options);
    return source.ok() ? std::move(*source) : nullptr;
  }

  std::unique_ptr<FakeMetadataServer> server_;
  std::unique_ptr<AwsSpotSource> source_;
};

TEST_F(AwsSpotSourceTest, NoInstanceActionAndNoEvents_IsNoNotice) {
  EXPECT_EQ(PollOrFail(*source_, kAwsNow), std::nullopt);
  const std::vector<testing::ReceivedRequest> requests = server_->requests();
  ASSERT_EQ(requests.size(), 3u);
  EXPECT_EQ(requests[0].method, "PUT");
  EXPECT_EQ(requests[0].headers.at("x-aws-ec2-metadata-token-ttl-seconds"), "21600");
  for (size_t i = 1; i < requests.size(); ++i) {
    SCOPED_TRACE(requests[i].path);
    EXPECT_EQ(requests[i].method, "GET");
    EXPECT_EQ(requests[i].headers.at("x-aws-ec2-metadata-token"), "token-1");
  }
  EXPECT_EQ(source_->name(), "aws-spot");
}

TEST_F(AwsSpotSourceTest, InstanceActions_ArePreemptionNoticesDueAtTheirTime) {
  struct Case {
    const char* body;
    const char* detail;
    absl::Time deadline;
  };
  const Case cases[] = {
      {R"({"action": "terminate", "time": "2026-11-22T23:59:00Z"})",
       "spot instance-action terminate", Utc(2026, 11, 22, 23, 59, 0)},
      {R"({"action":"stop","time":"2026-11-22T23:59:00Z"})", "spot instance-action stop",
       Utc(2026, 11, 22, 23, 59, 0)},
      {R"({"action":"hibernate","time":"2026-01-02T03:04:05+01:00","extra":1})",
       "spot instance-action hibernate", Utc(2026, 1, 2, 2, 4, 5)},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.body);
    server_->Set("GET", kAction, ScriptedResponse::Ok(c.body));
    EXPECT_THAT(PollOrFail(*source_, kAwsNow),
                Optional(NodeNotice{"aws-spot", "preemption", c.detail, c.deadline}));
  }
  // An interruption outranks maintenance; the events path is not even read.
  EXPECT_EQ(server_->CountOf("GET", kEvents), 0);
}

TEST_F(AwsSpotSourceTest, TokenIsReusedUntilShortlyBeforeItExpires) {
  ASSERT_EQ(PollOrFail(*source_, kAwsNow), std::nullopt);
  ASSERT_EQ(PollOrFail(*source_, kAwsNow + absl::Hours(5)), std::nullopt);
  EXPECT_EQ(server_->CountOf("PUT", kToken), 1);
  ASSERT_EQ(PollOrFail(*source_, kAwsNow + absl::Hours(6) - absl::Seconds(30)), std::nullopt);
  EXPECT_EQ(server_->CountOf("PUT", kToken), 2);
}

TEST_F(AwsSpotSourceTest, RejectedToken_IsUnavailableAndRenewedOnTheNextPoll) {
  ASSERT_EQ(PollOrFail(*source_, kAwsNow), std::nullopt);
  server_->Set("GET", kAction, ScriptedResponse::Status(401));
  EXPECT_THAT(source_->Poll(kAwsNow + absl::Seconds(1)),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("rejected the session token")));
  server_->Set("GET", kAction, ScriptedResponse::Status(404));
  server_->Set("PUT", kToken, ScriptedResponse::Ok("token-2"));
  ASSERT_EQ(PollOrFail(*source_, kAwsNow + absl::Seconds(2)), std::nullopt);
  EXPECT_EQ(server_->CountOf("PUT", kToken), 2);
  EXPECT_EQ(server_->requests().back().headers.at("x-aws-ec2-metadata-token"), "token-2");
}

TEST_F(AwsSpotSourceTest, ScheduledEvents_AreMaintenanceNoticesUnlessCanceledOrCompleted) {
  struct Case {
    const char* name;
    const char* body;
    std::optional<NodeNotice> want;
  };
  const Case cases[] = {
      {"empty array", "[]", std::nullopt},
      {"empty body", "", std::nullopt},
      {"active reboot",
       R"([{"Code": "system-reboot", "Description": "scheduled reboot", "EventId": "e-1",
            "NotBefore": "21 Jan 2019 09:00:43 GMT", "NotAfter": "21 Jan 2019 09:17:23 GMT",
            "State": "active"}])",
       NodeNotice{"aws-spot", "maintenance",
                  "scheduled event system-reboot not before 21 Jan 2019 09:00:43 GMT",
                  Utc(2019, 1, 21, 9, 0, 43)}},
      {"canceled then active",
       R"([{"Code": "instance-stop", "State": "canceled", "NotBefore": "1 Feb 2019 00:00:00 GMT"},
           {"Code": "instance-retirement", "State": "active",
            "NotBefore": "2 Feb 2019 10:00:00 GMT"}])",
       NodeNotice{"aws-spot", "maintenance",
                  "scheduled event instance-retirement not before 2 Feb 2019 10:00:00 GMT",
                  Utc(2019, 2, 2, 10, 0, 0)}},
      {"only completed", R"([{"Code": "system-reboot", "State": "completed"}])", std::nullopt},
      {"unparseable NotBefore", R"([{"Code": "system-maintenance", "NotBefore": "soon"}])",
       NodeNotice{"aws-spot", "maintenance", "scheduled event system-maintenance not before soon",
                  absl::InfiniteFuture()}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    server_->Set("GET", kEvents, ScriptedResponse::Ok(c.body));
    EXPECT_EQ(PollOrFail(*source_, kAwsNow), c.want);
  }
}

TEST_F(AwsSpotSourceTest, ScheduledEventsAreNotReadWhenDisabled) {
  source_ = MakeSource({.check_scheduled_maintenance = false});
  ASSERT_NE(source_, nullptr);
  server_->Set("GET", kEvents, ScriptedResponse::Ok(R"([{"Code": "system-reboot"}])"));
  EXPECT_EQ(PollOrFail(*source_, kAwsNow), std::nullopt);
  EXPECT_EQ(server_->CountOf("GET", kEvents), 0);
}

TEST_F(AwsSpotSourceTest, BadAnswers_AreErrorsThatSayWhatWasWrong) {
  struct Case {
    const char* name;
    std::string path;
    std::string method;
    ScriptedResponse response;
    absl::StatusCode code;
    const char* message;
  };
  const Case cases[] = {
      {"instance-action not JSON", kAction, "GET", ScriptedResponse::Ok("terminate soon"),
       absl::StatusCode::kInternal, "not JSON"},
      {"instance-action without time", kAction, "GET",
       ScriptedResponse::Ok(R"({"action": "terminate"})"), absl::StatusCode::kInternal,
       "want {\"action\""},
      {"instance-action with a bad time", kAction, "GET",
       ScriptedResponse::Ok(R"({"action": "terminate", "time": "tomorrow"})"),
       absl::StatusCode::kInternal, "tomorrow"},
      {"instance-action a JSON array", kAction, "GET", ScriptedResponse::Ok("[1, 2]"),
       absl::StatusCode::kInternal, "want {\"action\""},
      {"instance-action server error", kAction, "GET", ScriptedResponse::Status(503),
       absl::StatusCode::kUnavailable, "HTTP 503"},
      {"events not an array", kEvents, "GET", ScriptedResponse::Ok(R"({"Code": "x"})"),
       absl::StatusCode::kInternal, "want a JSON array"},
      {"events not JSON", kEvents, "GET", ScriptedResponse::Ok("[{"), absl::StatusCode::kInternal,
       "not JSON"},
      {"token refused (IMDSv2 disabled)", kToken, "PUT", ScriptedResponse::Status(403),
       absl::StatusCode::kPermissionDenied, "/latest/api/token"},
      {"token empty", kToken, "PUT", ScriptedResponse::Ok(""), absl::StatusCode::kInternal,
       "not a token"},
      {"token answer not HTTP", kToken, "PUT", ScriptedResponse::Garbage("\x01\x02\x03"),
       absl::StatusCode::kUnavailable, "not an HTTP response"},
      {"connection closed early", kAction, "GET", ScriptedResponse::CloseWithoutAnswer(),
       absl::StatusCode::kUnavailable, "without a response"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    // A fresh source each time, so the token step always runs.
    source_ = MakeSource({});
    ASSERT_NE(source_, nullptr);
    server_->Set("PUT", kToken, ScriptedResponse::Ok("token-1"));
    server_->Set("GET", kAction, ScriptedResponse::Status(404));
    server_->Set("GET", kEvents, ScriptedResponse::Ok("[]"));
    server_->Set(c.method, c.path, c.response);
    EXPECT_THAT(source_->Poll(kAwsNow), StatusIs(c.code, HasSubstr(c.message)));
  }
}

TEST_F(AwsSpotSourceTest, SlowServer_IsDeadlineExceededWithinTheRequestTimeout) {
  struct Case {
    const char* name;
    const char* method;
    const char* path;
  };
  // A token PUT that never comes back is what a pod-network caller sees with hop limit 1.
  const Case cases[] = {{"token PUT", "PUT", kToken},
                        {"instance-action", "GET", kAction},
                        {"scheduled events", "GET", kEvents}};
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    source_ = MakeSource({.request_timeout = absl::Milliseconds(300)});
    ASSERT_NE(source_, nullptr);
    server_->Set("PUT", kToken, ScriptedResponse::Ok("token-1"));
    server_->Set("GET", kAction, ScriptedResponse::Status(404));
    server_->Set("GET", kEvents, ScriptedResponse::Ok("[]"));
    server_->Set(c.method, c.path, ScriptedResponse::Ok("[]").After(absl::Seconds(30)));
    const absl::Time start = absl::Now();
    EXPECT_THAT(source_->Poll(kAwsNow), StatusIs(absl::StatusCode::kDeadlineExceeded));
    EXPECT_LT(absl::Now() - start, absl::Seconds(10));  // not the server's 30 s
  }
}

TEST(AwsSpotSourceServerDownTest, ConnectionRefused_IsUnavailable) {
  absl::StatusOr<std::unique_ptr<AwsSpotSource>> source = AwsSpotSource::Create(
      {.base_url = absl::StrCat("http://127.0.0.1:", FakeMetadataServer::UnusedPort())});
  ASSERT_THAT(source, IsOk());
  EXPECT_THAT((*source)->Poll(kAwsNow),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("refused")));
}

TEST(AwsSpotSourceCreateTest, BadOptions_AreInvalidArgument) {
  struct Case {
    const char* name;
    AwsSpotOptions options;
  };
  Case cases[] = {{"https", {.base_url = "https://169.254.169.254"}},
                  {"zero timeout", {.request_timeout = absl::ZeroDuration()}},
                  {"token TTL too long", {.token_ttl = absl::Hours(7)}},
                  {"token TTL too short", {.token_ttl = absl::Seconds(30)}}};
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    EXPECT_THAT(AwsSpotSource::Create(c.options), StatusIs(absl::StatusCode::kInvalidArgument));
  }
  EXPECT_THAT(AwsSpotSource::Create({}), IsOk());
}

}  // namespace
}  // namespace phalanx::agent
