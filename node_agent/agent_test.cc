// The agent's tick with fakes: a notice taints the node once (retried while the API fails), a
// fatal XID taints it, flips the GPU condition and asks the tasks on that GPU to abort their
// cliques; without Kubernetes or NVML the tick still runs and says so in its metrics.
#include "node_agent/agent.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/kube/node_preemption.h"
#include "common/kube/object_meta.h"
#include "common/kube/resources.h"
#include "common/kube/testing/fake_client.h"
#include "common/kube/testing/object_store.h"
#include "common/testing/fake_clock.h"
#include "node_agent/gpu/fake_nvml.h"
#include "prometheus/text_serializer.h"

namespace phalanx::agent {
namespace {

using ::testing::HasSubstr;

using kube::kNodes;

// A source whose answer the test sets.
class ScriptedSource final : public NoticeSource {
 public:
  std::string name() const override { return "scripted"; }
  absl::StatusOr<std::optional<NodeNotice>> Poll(absl::Time) override { return next; }
  absl::StatusOr<std::optional<NodeNotice>> next = std::optional<NodeNotice>();
};

class AgentTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(store_
                    .Create("nodes", "", kube::Json::parse(R"({"apiVersion":"v1","kind":"Node",
                                  "metadata":{"name":"n1"},"spec":{"taints":[{"key":"other","effect":"NoSchedule"}]},
                                  "status":{"conditions":[{"type":"Ready","status":"True"}]}})"))
                    .ok());
  }

  std::unique_ptr<Agent> MakeAgent(NvmlApi* nvml, bool with_kube = true,
                                   GpuFailurePolicy policy = GpuFailurePolicy::kNode) {
    auto source = std::make_unique<ScriptedSource>();
    source_ = source.get();
    std::vector<std::unique_ptr<NoticeSource>> sources;
    sources.push_back(std::move(source));
    if (nvml != nullptr) tracker_ = *GpuHealthTracker::Create(*nvml);
    AgentOptions options;
    options.thp_path = "/nonexistent/thp";
    options.gpu_failure_policy = policy;
    return std::make_unique<Agent>(
        options, metrics_, with_kube ? &marker_ : nullptr,
        [this](bool, const std::string& reason, const std::string& message) {
          events_.push_back(reason + ": " + message);
        },
        std::move(sources), tracker_.get(),
        nvml == nullptr ? absl::NotFoundError("no NVIDIA driver") : absl::OkStatus(), cliques_);
  }

  kube::Json Node() { return *client_.Get(kNodes, "", "n1"); }
  std::vector<std::string> TaintKeys() {
    std::vector<std::string> keys;
    const kube::Json node = Node();  // owned here: the loop reads into it
    for (const kube::Json& t :
         kube::ArrayOrEmpty(kube::FieldOrNull(node, "spec"), "taints").as_array()) {
      keys.push_back(kube::StringAt(t, "key"));
    }
    return keys;
  }
  std::string Condition(const std::string& type) {
    const kube::Json node = Node();
    for (const kube::Json& c :
         kube::ArrayOrEmpty(kube::FieldOrNull(node, "status"), "conditions").as_array()) {
      if (kube::StringAt(c, "type") == type) return kube::StringAt(c, "status");
    }
    return "";
  }
  std::string Metrics() { return prometheus::TextSerializer().Serialize(registry_.Collect()); }

  testing::FakeClock clock_;
  kube::fake::ObjectStore store_{clock_};
  kube::fake::FakeClient client_{store_};
  NodeMarker marker_{client_, "n1"};
  prometheus::Registry registry_;
  AgentMetrics metrics_{registry_};
  CliqueRegistry cliques_;
  std::unique_ptr<FakeNvml> nvml_;  // before tracker_, which uses it until it is destroyed
  std::unique_ptr<GpuHealthTracker> tracker_;
  ScriptedSource* source_ = nullptr;
  std::vector<std::string> events_;
};

TEST_F(AgentTest, ANoticeTaintsTheNodeOnceAndIsRecorded) {
  auto agent = MakeAgent(nullptr);
  agent->Tick(clock_.Now());
  EXPECT_THAT(TaintKeys(), ::testing::ElementsAre("other"));
  EXPECT_EQ(Condition("PhalanxPreemptionNotice"), "False");
  EXPECT_EQ(Condition("Ready"), "True");  // the kubelet's condition stays

  source_->next = std::optional<NodeNotice>(NodeNotice{
      "scripted", kPreemptionNotice, "preempted=TRUE", clock_.Now() + absl::Seconds(30)});
  client_.FailNext(1, absl::UnavailableError("API server busy"));  // the first taint write fails
  clock_.Advance(absl::Seconds(1));
  agent->Tick(clock_.Now());
  clock_.Advance(absl::Seconds(1));
  agent->Tick(clock_.Now());
  agent->Tick(clock_.Now());
  EXPECT_THAT(TaintKeys(), ::testing::ElementsAre("other", kPreemptingTaint));
  EXPECT_TRUE(agent->node_marked());
  EXPECT_EQ(Condition("PhalanxPreemptionNotice"), "True");
  ASSERT_EQ(events_.size(), 1u);
  EXPECT_THAT(events_[0], HasSubstr("PreemptionNotice: preemption notice from scripted"));
  EXPECT_THAT(Metrics(),
              HasSubstr(R"(phalanx_agent_notices_total{kind="preemption",source="scripted"} 1)"));
}

// The notice's deadline goes onto the Node with the taint (kube/node_preemption.h), so the operator
// can give the job's checkpoint the earlier of it and its own grace.
TEST_F(AgentTest, ANoticeWithADeadlineAnnotatesTheNodeInTheTaintsWrite) {
  const struct {
    std::string name;
    absl::Time deadline;
    std::string want;  // the annotation; "" for none
  } cases[] = {
      {"gceThirtySeconds", absl::FromUnixSeconds(1'700'000'030) + absl::Milliseconds(900),
       "2023-11-14T22:13:50Z"},  // rounded down: never later than the source said
      {"unknownDeadline", absl::InfiniteFuture(), ""},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    ASSERT_TRUE(marker_.Untaint(kPreemptingTaint).ok());
    kube::Json node = Node();
    node["metadata"]["annotations"] = kube::Json::object();
    ASSERT_TRUE(client_.Update(kNodes, "", node).ok());
    auto agent = MakeAgent(nullptr);
    source_->next = std::optional<NodeNotice>(
        NodeNotice{"scripted", kPreemptionNotice, "preempted=TRUE", c.deadline});
    agent->Tick(clock_.Now());
    ASSERT_TRUE(agent->node_marked());
    const kube::Json marked = Node();  // owned here: the references below point into it
    const kube::Json& annotation =
        kube::FieldOrNull(kube::FieldOrNull(kube::FieldOrNull(marked, "metadata"), "annotations"),
                          kube::kPreemptionDeadlineAnnotation);
    EXPECT_EQ(annotation.is_string() ? annotation.as_string() : "", c.want);
    EXPECT_THAT(TaintKeys(), ::testing::Contains(kPreemptingTaint));
  }
}

TEST_F(AgentTest, TaintingAgainUpdatesOnlyAChangedAnnotation) {
  ASSERT_TRUE(marker_.Taint(kPreemptingTaint, "a", {{"phalanx.dev/x", "1"}}).ok());
  const std::string version = kube::MetaString(Node(), "resourceVersion");
  ASSERT_TRUE(marker_.Taint(kPreemptingTaint, "a", {{"phalanx.dev/x", "1"}}).ok());
  EXPECT_EQ(kube::MetaString(Node(), "resourceVersion"), version);  // nothing to write
  ASSERT_TRUE(marker_.Taint(kPreemptingTaint, "a", {{"phalanx.dev/x", "2"}}).ok());
  EXPECT_NE(kube::MetaString(Node(), "resourceVersion"), version);
  const kube::Json node = Node();
  EXPECT_EQ(kube::FieldOrNull(kube::FieldOrNull(kube::FieldOrNull(node, "metadata"), "annotations"),
                              "phalanx.dev/x")
                .as_string(),
            "2");
  EXPECT_THAT(TaintKeys(), ::testing::ElementsAre("other", kPreemptingTaint));
}

TEST_F(AgentTest, AFailingSourceIsCountedAndTheTickGoesOn) {
  auto agent = MakeAgent(nullptr);
  // At 0 before the first error, so that an alert on its increase sees that first one.
  EXPECT_THAT(Metrics(),
              HasSubstr(R"(phalanx_agent_notice_source_errors_total{source="scripted"} 0)"));
  source_->next = absl::UnavailableError("metadata server down");
  agent->Tick(clock_.Now());
  agent->Tick(clock_.Now());
  EXPECT_THAT(Metrics(),
              HasSubstr(R"(phalanx_agent_notice_source_errors_total{source="scripted"} 2)"));
  EXPECT_FALSE(agent->notice().has_value());
}

TEST_F(AgentTest, AFatalXidTaintsTheNodeAndAsksTheTasksOnThatGpuToAbort) {
  nvml_ = std::make_unique<FakeNvml>(FakeNvml::Options{FakeNvml::MakeGpus(2)});
  FakeNvml& nvml = *nvml_;
  auto agent = MakeAgent(&nvml);
  ASSERT_TRUE(cliques_.Report({"job", 3, 0, "c", "READY", {1}, clock_.Now()}, {"k"}).ok());
  ASSERT_TRUE(cliques_.Report({"job", 2, 0, "c", "READY", {0}, clock_.Now()}, {"k"}).ok());
  agent->Tick(clock_.Now());
  EXPECT_EQ(Condition("PhalanxGpuHealthy"), "True");
  nvml.InjectXid(1, 79);  // "GPU has fallen off the bus"
  agent->Tick(clock_.Now());
  EXPECT_THAT(TaintKeys(), ::testing::Contains(kGpuFailedTaint));
  EXPECT_EQ(Condition("PhalanxGpuHealthy"), "False");
  EXPECT_THAT(cliques_.TakeAbortRequest("job", 3), HasSubstr("gpu 1 failed"));
  EXPECT_EQ(cliques_.TakeAbortRequest("job", 2), "");
  ASSERT_EQ(events_.size(), 1u);
  EXPECT_THAT(events_[0], HasSubstr("GpuFailed: GPU 1"));
  const std::string metrics = Metrics();
  EXPECT_THAT(metrics, HasSubstr(R"(phalanx_agent_xid_errors_total{xid="79"} 1)"));
  EXPECT_THAT(metrics, HasSubstr(R"(phalanx_agent_gpu_health{health="failed"} 1)"));
  EXPECT_THAT(metrics, HasSubstr("phalanx_agent_gpus 2"));
}

TEST_F(AgentTest, TaskPolicy_AFatalXidAbortsOnlyTheTasksOnThatGpu_AndLeavesTheNodeSchedulable) {
  nvml_ = std::make_unique<FakeNvml>(FakeNvml::Options{FakeNvml::MakeGpus(2)});
  FakeNvml& nvml = *nvml_;
  auto agent = MakeAgent(&nvml, /*with_kube=*/true, GpuFailurePolicy::kTask);
  ASSERT_TRUE(cliques_.Report({"job", 3, 0, "c", "READY", {1}, clock_.Now()}, {"k"}).ok());
  ASSERT_TRUE(cliques_.Report({"job", 2, 0, "c", "READY", {0}, clock_.Now()}, {"k"}).ok());
  agent->Tick(clock_.Now());
  nvml.InjectXid(1, 79);
  agent->Tick(clock_.Now());
  agent->Tick(clock_.Now());
  EXPECT_THAT(TaintKeys(), ::testing::Not(::testing::Contains(kGpuFailedTaint)))
      << "a taint would move every task on the node";
  EXPECT_EQ(Condition("PhalanxGpuHealthy"), "False");
  EXPECT_THAT(cliques_.TakeAbortRequest("job", 3), HasSubstr("gpu 1 failed"));
  EXPECT_EQ(cliques_.TakeAbortRequest("job", 2), "");
  ASSERT_EQ(events_.size(), 1u);
  EXPECT_THAT(events_[0], HasSubstr("GpuFailed: GPU 1"));
}

TEST(GpuFailurePolicyTest, ParsesItsTwoNames_AndRefusesOthersSayingWhatTheyMean) {
  EXPECT_EQ(*ParseGpuFailurePolicy("node"), GpuFailurePolicy::kNode);
  EXPECT_EQ(*ParseGpuFailurePolicy("task"), GpuFailurePolicy::kTask);
  EXPECT_THAT(ParseGpuFailurePolicy("gpu").status().message(), HasSubstr("node: move every"));
}

TEST_F(AgentTest, WithoutKubernetesOrADriverItStillChecksAndSaysSo) {
  auto agent = MakeAgent(nullptr, /*with_kube=*/false);
  source_->next = std::optional<NodeNotice>(NodeNotice{"scripted", kMaintenanceNotice, "x"});
  agent->Tick(clock_.Now());
  EXPECT_TRUE(agent->notice().has_value());
  EXPECT_FALSE(agent->node_marked());
  EXPECT_THAT(TaintKeys(), ::testing::ElementsAre("other"));
  const std::string metrics = Metrics();
  EXPECT_THAT(metrics, HasSubstr("phalanx_agent_nvml_available 0"));
  EXPECT_THAT(metrics, HasSubstr("phalanx_agent_gpus 0"));
  EXPECT_THAT(metrics, HasSubstr("phalanx_agent_last_check_timestamp_seconds"));
}

}  // namespace
}  // namespace phalanx::agent
