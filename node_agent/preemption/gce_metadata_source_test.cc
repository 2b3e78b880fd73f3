#include "node_agent/preemption/gce_metadata_source.h"

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

constexpr char kPreempted[] = "/computeMetadata/v1/instance/preempted";
constexpr char kMaintenance[] = "/computeMetadata/v1/instance/maintenance-event";
const absl::Time kNow = absl::FromUnixSeconds(1'700'000'000);

class GceMetadataSourceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<FakeMetadataServer>> server = FakeMetadataServer::Start();
    ASSERT_THAT(server, IsOk());
    server_ = std::move(*server);
    source_ = MakeSource(server_->base_url());
    ASSERT_NE(source_, nullptr);
    Answer("FALSE", "NONE");
  }

  static std::unique_ptr<GceMetadataSource> MakeSource(const std::string& base_url,
                                                       absl::Duration timeout = absl::Seconds(2)) {
    GceMetadataOptions options;
    options.base_url = base_url;
    options.request_timeout = timeout;
    absl::StatusOr<std::unique_ptr<GceMetadataSource>> source = GceMetadataSource::Create(options);
    return source.ok() ? std::move(*source) : nullptr;
  }

  void Answer(const std::string& preempted, const std::string& maintenance) {
    server_->Set("GET", kPreempted, ScriptedResponse::Ok(preempted));
    server_->Set("GET", kMaintenance, ScriptedResponse::Ok(maintenance));
  }

  std::unique_ptr<FakeMetadataServer> server_;
  std::unique_ptr<GceMetadataSource> source_;
};

TEST_F(GceMetadataSourceTest, NotPreemptedAndNoMaintenance_IsNoNotice) {
  EXPECT_EQ(PollOrFail(*source_, kNow), std::nullopt);
  ASSERT_EQ(server_->requests().size(), 2u);
  for (const auto& request : server_->requests()) {
    SCOPED_TRACE(request.path);
    EXPECT_EQ(request.headers.at("metadata-flavor"), "Google");
  }
  EXPECT_EQ(source_->name(), "gce-metadata");
}

TEST_F(GceMetadataSourceTest, Preempted_IsPreemptionNoticeThirtySecondsAfterItWasFirstSeen) {
  Answer("TRUE", "NONE");
  const NodeNotice want{"gce-metadata", "preemption", "instance/preempted=TRUE",
                        kNow + absl::Seconds(30)};
  EXPECT_THAT(PollOrFail(*source_, kNow), Optional(want));
  // Later ticks keep the deadline where it was.
  EXPECT_THAT(PollOrFail(*source_, kNow + absl::Seconds(5)), Optional(want));
  // Preempted wins without asking about maintenance.
  EXPECT_EQ(server_->CountOf("GET", kMaintenance), 0);
}

TEST_F(GceMetadataSourceTest, NoticeThatClearsAndReturns_GetsAFreshDeadline) {
  Answer("TRUE", "NONE");
  ASSERT_NE(PollOrFail(*source_, kNow), std::nullopt);
  Answer("FALSE", "NONE");
  EXPECT_EQ(PollOrFail(*source_, kNow + absl::Seconds(10)), std::nullopt);
  Answer("TRUE", "NONE");
  std::optional<NodeNotice> notice = PollOrFail(*source_, kNow + absl::Seconds(20));
  ASSERT_TRUE(notice.has_value());
  EXPECT_EQ(notice->deadline, kNow + absl::Seconds(50));
}

TEST_F(GceMetadataSourceTest, EventsThatMayStopTheVm_AreMaintenanceNoticesSixtySecondsAhead) {
  struct Case {
    const char* body;
    std::optional<std::string> detail;
  };
  const Case cases[] = {
      {"NONE", std::nullopt},
      {"NONE\n", std::nullopt},
      {"FALSE", std::nullopt},                        // seen in the wild; stops nothing
      {"MIGRATE_ON_HOST_MAINTENANCE", std::nullopt},  // live migration: the VM keeps running
      {"TERMINATE_ON_HOST_MAINTENANCE\n",
       "instance/maintenance-event=TERMINATE_ON_HOST_MAINTENANCE"},
      {"SOME_FUTURE_EVENT", "instance/maintenance-event=SOME_FUTURE_EVENT"},  // may stop it
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.body);
    Answer("FALSE", c.body);
    const std::optional<NodeNotice> notice = PollOrFail(*source_, kNow);
    if (!c.detail.has_value()) {
      EXPECT_EQ(notice, std::nullopt);
      continue;
    }
    EXPECT_THAT(notice, Optional(NodeNotice{"gce-metadata", "maintenance", *c.detail,
                                            kNow + absl::Seconds(60)}));
  }
}

TEST_F(GceMetadataSourceTest, BadAnswers_AreErrorsThatSayWhatWasWrong) {
  struct Case {
    const char* name;
    ScriptedResponse preempted;
    ScriptedResponse maintenance;
    absl::StatusCode code;
    const char* message;
  };
  const Case cases[] = {
      {"preempted neither TRUE nor FALSE", ScriptedResponse::Ok("maybe"),
       ScriptedResponse::Ok("NONE"), absl::StatusCode::kInternal, "want TRUE or FALSE"},
      {"preempted is an HTML page", ScriptedResponse::Ok("<html>login</html>"),
       ScriptedResponse::Ok("NONE"), absl::StatusCode::kInternal, "<html>"},
      {"maintenance-event garbage", ScriptedResponse::Ok("FALSE"),
       ScriptedResponse::Ok("{\"x\": 1}"), absl::StatusCode::kInternal, "maintenance-event"},
      {"maintenance-event empty", ScriptedResponse::Ok("FALSE"), ScriptedResponse::Ok(""),
       absl::StatusCode::kInternal, "want NONE"},
      {"not HTTP", ScriptedResponse::Garbage("SSH-2.0-OpenSSH\r\n"), ScriptedResponse::Ok("NONE"),
       absl::StatusCode::kUnavailable, "not an HTTP response"},
      {"server error", ScriptedResponse::Status(500, "oops"), ScriptedResponse::Ok("NONE"),
       absl::StatusCode::kUnavailable, "HTTP 500"},
      {"not on GCE", ScriptedResponse::Status(404), ScriptedResponse::Ok("NONE"),
       absl::StatusCode::kNotFound, "instance/preempted"},
      {"connection closed early", ScriptedResponse::CloseWithoutAnswer(),
       ScriptedResponse::Ok("NONE"), absl::StatusCode::kUnavailable, "without a response"},
      {"body cut short", ScriptedResponse::Ok("FALSE"), ScriptedResponse::TruncatedBody("NO"),
       absl::StatusCode::kUnavailable, "body bytes"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    server_->Set("GET", kPreempted, c.preempted);
    server_->Set("GET", kMaintenance, c.maintenance);
    EXPECT_THAT(source_->Poll(kNow), StatusIs(c.code, HasSubstr(c.message)));
  }
}

TEST_F(GceMetadataSourceTest, SlowServer_IsDeadlineExceededWithinTheRequestTimeout) {
  source_ = MakeSource(server_->base_url(), absl::Milliseconds(300));
  ASSERT_NE(source_, nullptr);
  struct Case {
    const char* name;
    const char* slow_path;
  };
  const Case cases[] = {{"first request slow", kPreempted}, {"second request slow", kMaintenance}};
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    Answer("FALSE", "NONE");
    server_->Set("GET", c.slow_path, ScriptedResponse::Ok("FALSE").After(absl::Seconds(30)));
    const absl::Time start = absl::Now();
    EXPECT_THAT(source_->Poll(kNow), StatusIs(absl::StatusCode::kDeadlineExceeded));
    EXPECT_LT(absl::Now() - start, absl::Seconds(10));  // not the server's 30 s
  }
}

TEST(GceMetadataSourceServerDownTest, ConnectionRefused_IsUnavailable) {
  GceMetadataOptions options;
  options.base_url = absl::StrCat("http://127.0.0.1:", FakeMetadataServer::UnusedPort());
  absl::StatusOr<std::unique_ptr<GceMetadataSource>> source = GceMetadataSource::Create(options);
  ASSERT_THAT(source, IsOk());
  EXPECT_THAT((*source)->Poll(kNow),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("refused")));
}

TEST(GceMetadataSourceCreateTest, BadOptions_AreInvalidArgument) {
  struct Case {
    const char* name;
    GceMetadataOptions options;
  };
  Case cases[] = {{"https", {.base_url = "https://metadata.google.internal"}},
                  {"no scheme", {.base_url = "metadata.google.internal"}},
                  {"zero timeout", {.request_timeout = absl::ZeroDuration()}},
                  {"negative grace", {.preemption_grace = absl::Seconds(-1)}}};
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    EXPECT_THAT(GceMetadataSource::Create(c.options), StatusIs(absl::StatusCode::kInvalidArgument));
  }
  EXPECT_THAT(GceMetadataSource::Create({}), IsOk());
}

}  // namespace
}  // namespace phalanx::agent
