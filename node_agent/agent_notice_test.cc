// The agent's notices against the scripted metadata server: a GCE maintenance event that ends
// (maintenance-event back to NONE, or FALSE) lifts the agent's taint while a preemption stays;
// a hanging metadata server does not hold up the tick or the other sources; and huge,
// header-flood and drip answers are each logged (not hidden behind an earlier error's code); a
// maintenance taint an earlier agent process left is lifted once the window is over.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/kube/object_meta.h"
#include "common/kube/resources.h"
#include "common/kube/testing/fake_client.h"
#include "common/kube/testing/object_store.h"
#include "common/testing/eventually.h"
#include "common/testing/fake_clock.h"
#include "node_agent/agent.h"
#include "node_agent/preemption/background_source.h"
#include "node_agent/preemption/fake_metadata_server.h"
#include "node_agent/preemption/gce_metadata_source.h"
#include "node_agent/source_error_log.h"

namespace phalanx::agent {
namespace {

using ::phalanx::agent::testing::FakeMetadataServer;
using ::phalanx::agent::testing::ScriptedResponse;
using ::phalanx::testing::Eventually;
using ::testing::Contains;
using ::testing::HasSubstr;
using ::testing::Not;

using kube::kNodes;

constexpr char kPreempted[] = "/computeMetadata/v1/instance/preempted";
constexpr char kMaintenance[] = "/computeMetadata/v1/instance/maintenance-event";

std::unique_ptr<GceMetadataSource> Gce(const FakeMetadataServer& server,
                                       absl::Duration timeout = absl::Seconds(5)) {
  GceMetadataOptions options;
  options.base_url = server.base_url();
  options.request_timeout = timeout;
  return *GceMetadataSource::Create(options);
}

class AgentNoticeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(store_
                    .Create("nodes", "", kube::Json::parse(R"({"apiVersion":"v1","kind":"Node",
                                  "metadata":{"name":"n1"},"spec":{}})"))
                    .ok());
    server_ = *FakeMetadataServer::Start();
    Answer("FALSE", "NONE");
  }

  void Answer(const std::string& preempted, const std::string& maintenance) {
    server_->Set("GET", kPreempted, ScriptedResponse::Ok(preempted));
    server_->Set("GET", kMaintenance, ScriptedResponse::Ok(maintenance));
  }

  std::unique_ptr<Agent> MakeAgent(std::vector<std::unique_ptr<NoticeSource>> sources) {
    AgentOptions options;
    options.thp_path = "/nonexistent/thp";
    return std::make_unique<Agent>(
        options, metrics_, &marker_,
        [this](bool, const std::string& reason, const std::string&) { events_.push_back(reason); },
        std::move(sources), nullptr, absl::NotFoundError("no driver"), cliques_);
  }

  std::vector<std::string> TaintKeys() {
    std::vector<std::string> keys;
    const kube::Json node = *client_.Get(kNodes, "", "n1");
    for (const kube::Json& t :
         kube::ArrayOrEmpty(kube::FieldOrNull(node, "spec"), "taints").as_array()) {
      keys.push_back(kube::StringAt(t, "key"));
    }
    return keys;
  }

  phalanx::testing::FakeClock clock_;
  kube::fake::ObjectStore store_{clock_};
  kube::fake::FakeClient client_{store_};
  NodeMarker marker_{client_, "n1"};
  prometheus::Registry registry_;
  AgentMetrics metrics_{registry_};
  CliqueRegistry cliques_;
  std::unique_ptr<FakeMetadataServer> server_;
  std::vector<std::string> events_;
};

TEST_F(AgentNoticeTest, AMaintenanceEventThatEndsLiftsTheTaint_APreemptionStays) {
  std::vector<std::unique_ptr<NoticeSource>> sources;
  sources.push_back(Gce(*server_));
  auto agent = MakeAgent(std::move(sources));
  const struct {
    const char* name;
    const char* over;  // what maintenance-event says once the window is over
  } cases[] = {{"back to NONE", "NONE"},
               {"FALSE", "FALSE"},
               {"live migration", "MIGRATE_ON_HOST_MAINTENANCE"}};
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    Answer("FALSE", "TERMINATE_ON_HOST_MAINTENANCE");
    agent->Tick(clock_.Now());
    EXPECT_THAT(TaintKeys(), Contains(kPreemptingTaint));
    Answer("FALSE", c.over);
    clock_.Advance(absl::Seconds(1));
    agent->Tick(clock_.Now());
    EXPECT_THAT(TaintKeys(), Not(Contains(kPreemptingTaint)));
    EXPECT_FALSE(agent->notice().has_value());
    EXPECT_THAT(events_, Contains("PreemptionNoticeCleared"));
  }
  // A preemption is not undone by the metadata server changing its mind: the VM is going.
  Answer("TRUE", "NONE");
  agent->Tick(clock_.Now());
  Answer("FALSE", "NONE");
  agent->Tick(clock_.Now());
  EXPECT_THAT(TaintKeys(), Contains(kPreemptingTaint));
  EXPECT_EQ(agent->notice()->kind, kPreemptionNotice);
}

// The agent crashed or was restarted during a maintenance window: the taint it left names the
// source and the kind of notice, so the next agent lifts it once the window is over (and not
// before its source answered). A preemption's taint, and one the agent did not write, stay.
TEST_F(AgentNoticeTest, AMaintenanceTaintAnEarlierAgentLeftIsLiftedOnceTheWindowIsOver) {
  auto agent_with_gce = [&] {
    std::vector<std::unique_ptr<NoticeSource>> sources;
    sources.push_back(Gce(*server_));
    return MakeAgent(std::move(sources));
  };
  Answer("FALSE", "TERMINATE_ON_HOST_MAINTENANCE");
  agent_with_gce()->Tick(clock_.Now());  // marks the node, then "crashes"
  ASSERT_THAT(TaintKeys(), Contains(kPreemptingTaint));
  EXPECT_EQ(kube::FieldOrNull(
                kube::FieldOrNull(kube::FieldOrNull(*client_.Get(kNodes, "", "n1"), "metadata"),
                                  "annotations"),
                kNoticeKindAnnotation)
                .as_string(),
            kMaintenanceNotice);

  // Restarted while the window lasts: the taint is this agent's notice now.
  auto second = agent_with_gce();
  second->Tick(clock_.Now());
  EXPECT_THAT(TaintKeys(), Contains(kPreemptingTaint));
  ASSERT_TRUE(second->notice().has_value());
  second.reset();

  // Restarted after the window ended: lifted on the first tick the source answers.
  Answer("FALSE", "NONE");
  events_.clear();
  agent_with_gce()->Tick(clock_.Now());
  EXPECT_THAT(TaintKeys(), Not(Contains(kPreemptingTaint)));
  EXPECT_THAT(events_, Contains("PreemptionNoticeCleared"));

  // ... but not while its background source has not answered yet (nothing known is no news).
  Answer("FALSE", "TERMINATE_ON_HOST_MAINTENANCE");
  agent_with_gce()->Tick(clock_.Now());
  ASSERT_THAT(TaintKeys(), Contains(kPreemptingTaint));
  Answer("FALSE", "NONE");
  server_->Set("GET", kMaintenance, ScriptedResponse::Ok("NONE").After(absl::Hours(1)));
  {
    std::vector<std::unique_ptr<NoticeSource>> sources;
    sources.push_back(std::make_unique<BackgroundSource>(Gce(*server_, absl::Minutes(10)), clock_,
                                                         absl::Seconds(1), absl::Minutes(1)));
    auto waiting = MakeAgent(std::move(sources));
    waiting->Tick(clock_.Now());
    EXPECT_THAT(TaintKeys(), Contains(kPreemptingTaint));
    server_.reset();  // ends the hanging answer before the source's thread is joined
  }
  server_ = *FakeMetadataServer::Start();

  // A preemption's taint stays after a restart: the VM is going.
  ASSERT_TRUE(marker_.Untaint(kPreemptingTaint).ok());
  Answer("TRUE", "NONE");
  agent_with_gce()->Tick(clock_.Now());
  ASSERT_THAT(TaintKeys(), Contains(kPreemptingTaint));
  Answer("FALSE", "NONE");
  agent_with_gce()->Tick(clock_.Now());
  EXPECT_THAT(TaintKeys(), Contains(kPreemptingTaint));

  // A taint someone else wrote (by hand, with a value that names no source) is not the agent's.
  ASSERT_TRUE(marker_.Untaint(kPreemptingTaint).ok());
  ASSERT_TRUE(
      marker_.Taint(kPreemptingTaint, "manual", {{kNoticeKindAnnotation, "maintenance"}}).ok());
  agent_with_gce()->Tick(clock_.Now());
  EXPECT_THAT(TaintKeys(), Contains(kPreemptingTaint));
}

TEST_F(AgentNoticeTest, AHangingMetadataServerDoesNotHoldUpTheTickOrOtherSources) {
  // One metadata server hangs for an hour (its source would wait 10 min); another says the VM
  // is preempted. Both sources poll on their own threads.
  std::unique_ptr<Agent> agent;  // declared first: destroyed after the hanging server, whose
                                 // destruction ends the request the slow source's thread is in
  auto hanging = *FakeMetadataServer::Start();
  hanging->Set("GET", kPreempted, ScriptedResponse::Ok("FALSE").After(absl::Hours(1)));
  Answer("TRUE", "NONE");
  auto slow = std::make_unique<BackgroundSource>(Gce(*hanging, absl::Minutes(10)), clock_,
                                                 absl::Seconds(1), absl::Seconds(10));
  auto fast = std::make_unique<BackgroundSource>(Gce(*server_), clock_, absl::Seconds(1),
                                                 absl::Seconds(10));
  BackgroundSource* slow_source = slow.get();
  BackgroundSource* fast_source = fast.get();
  std::vector<std::unique_ptr<NoticeSource>> sources;
  sources.push_back(std::move(slow));  // first in line, as a tick that polls in turn meets it
  sources.push_back(std::move(fast));
  agent = MakeAgent(std::move(sources));
  ASSERT_TRUE(Eventually([&] { return fast_source->completed_polls() >= 1; }, absl::Seconds(30)));
  ASSERT_TRUE(
      Eventually([&] { return hanging->CountOf("GET", kPreempted) == 1; }, absl::Seconds(30)));
  agent->Tick(clock_.Now());
  // The tick acted on the preemption while the other source's request is still hanging.
  EXPECT_TRUE(slow_source->in_flight());
  ASSERT_TRUE(agent->notice().has_value());
  EXPECT_EQ(agent->notice()->kind, kPreemptionNotice);
  EXPECT_THAT(TaintKeys(), Contains(kPreemptingTaint));
}

TEST_F(AgentNoticeTest, HugeHeaderFloodAndDripAnswersAreEachLogged) {
  // What the agent logs for each failure, in the order a hostile server served them; before,
  // only the first Unavailable and the first DeadlineExceeded made it into the log.
  auto source = Gce(*server_, absl::Milliseconds(1500));
  SourceErrorLog log;
  std::vector<std::string> lines;
  auto poll = [&](const char* what) {
    absl::StatusOr<std::optional<NodeNotice>> polled = source->Poll(clock_.Now());
    ASSERT_FALSE(polled.ok()) << what;
    std::optional<std::string> line = log.OnError(source->name(), polled.status(), clock_.Now());
    ASSERT_TRUE(line.has_value()) << what << " was not logged: " << polled.status();
    lines.push_back(*line);
    clock_.Advance(absl::Seconds(1));
  };
  server_->Set("GET", kPreempted, ScriptedResponse::Status(503, "down"));
  poll("a 503");
  server_->Set("GET", kPreempted, ScriptedResponse::Ok(std::string(2 << 20, 'x')));
  poll("a huge answer");
  ScriptedResponse flood = ScriptedResponse::Ok("FALSE");
  for (int i = 0; i < 20'000; ++i)
    flood.headers.push_back({absl::StrCat("X-Flood-", i), std::string(60, 'y')});
  server_->Set("GET", kPreempted, std::move(flood));
  poll("a header flood");
  server_->Set("GET", kPreempted, ScriptedResponse::Ok("FALSE").After(absl::Hours(1)));
  poll("no answer");
  server_->Set("GET", kPreempted, ScriptedResponse::Ok("FALSE").Drip(absl::Milliseconds(200)));
  poll("a drip");
  ASSERT_EQ(lines.size(), 5u);
  EXPECT_THAT(lines[1], HasSubstr("response from"));
  EXPECT_THAT(lines[2], HasSubstr("response headers from"));
  EXPECT_THAT(lines[3], HasSubstr("timed out waiting for"));
  EXPECT_THAT(lines[4], HasSubstr("timed out reading the answer"));
}

}  // namespace
}  // namespace phalanx::agent
