#include "node_agent/preemption/node_taint_source.h"

#include <optional>
#include <string>

#include "common/kube/resources.h"
#include "common/kube/testing/fake_client.h"
#include "common/kube/testing/object_store.h"
#include "common/testing/fake_clock.h"
#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "node_agent/preemption/notice_source_testing.h"

namespace phalanx::agent {
namespace {

using ::phalanx::agent::testing::PollOrFail;
using ::phalanx::testing::IsOk;
using ::phalanx::testing::StatusIs;

using kube::kNodes;
const absl::Time kTaintNow = absl::FromUnixSeconds(1'700'000'000);

kube::Json Node(const std::string& name, const std::string& spec_json) {
  return kube::Json::parse(R"({"apiVersion": "v1", "kind": "Node", "metadata": {"name": ")" + name +
                           R"("}, "spec": )" + spec_json + "}");
}

class NodeTaintSourceTest : public ::testing::Test {
 protected:
  phalanx::testing::FakeClock clock_;
  kube::fake::ObjectStore store_{clock_, 100};
  kube::fake::FakeClient client_{store_};
  NodeTaintSource source_{client_, "gpu-node-1"};
};

TEST_F(NodeTaintSourceTest, NodeTaintsAndCordon_AreNotices) {
  struct Case {
    const char* name;
    const char* spec;
    std::optional<NodeNotice> want;
  };
  auto notice = [](const char* kind, const char* detail) {
    return NodeNotice{"node-taint", kind, detail, absl::InfiniteFuture()};
  };
  const Case cases[] = {
      {"healthy node", R"({})", std::nullopt},
      {"unrelated taints", R"({"taints": [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}]})",
       std::nullopt},
      {"GKE termination",
       R"({"taints": [{"key": "cloud.google.com/impending-node-termination",
                       "effect": "NoSchedule"}]})",
       notice("preemption", "taint cloud.google.com/impending-node-termination")},
      {"AWS spot interruption",
       R"({"taints": [{"key": "aws-node-termination-handler/spot-itn", "effect": "NoExecute"}]})",
       notice("preemption", "taint aws-node-termination-handler/spot-itn")},
      {"autoscaler scale-down",
       R"({"taints": [{"key": "ToBeDeletedByClusterAutoscaler", "effect": "NoSchedule"}]})",
       notice("preemption", "taint ToBeDeletedByClusterAutoscaler")},
      {"phalanx marker", R"({"taints": [{"key": "phalanx.dev/preempting"}]})",
       notice("preemption", "taint phalanx.dev/preempting")},
      {"AWS scheduled maintenance",
       R"({"taints": [{"key": "aws-node-termination-handler/scheduled-maintenance"}]})",
       notice("maintenance", "taint aws-node-termination-handler/scheduled-maintenance")},
      {"drained",
       R"({"unschedulable": true,
           "taints": [{"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}]})",
       notice("maintenance", "taint node.kubernetes.io/unschedulable")},
      {"termination outranks a drain",
       R"({"unschedulable": true,
           "taints": [{"key": "node.kubernetes.io/unschedulable"},
                      {"key": "cloud.google.com/impending-node-termination"}]})",
       notice("preemption", "taint cloud.google.com/impending-node-termination")},
      {"cordoned before the taint lands", R"({"unschedulable": true})",
       notice("maintenance", "node cordoned (spec.unschedulable)")},
      {"uncordoned", R"({"unschedulable": false})", std::nullopt},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    ASSERT_THAT(client_.Create(kNodes, "", Node("gpu-node-1", c.spec)), IsOk());
    EXPECT_EQ(PollOrFail(source_, kTaintNow), c.want);
    ASSERT_THAT(client_.Delete(kNodes, "", "gpu-node-1", {}), IsOk());
  }
  EXPECT_EQ(source_.name(), "node-taint");
}

TEST_F(NodeTaintSourceTest, OnlyItsOwnNodeCounts) {
  ASSERT_THAT(client_.Create(kNodes, "", Node("gpu-node-1", "{}")), IsOk());
  ASSERT_THAT(
      client_.Create(kNodes, "",
                     Node("gpu-node-2", R"({"taints": [{"key": "phalanx.dev/preempting"}]})")),
      IsOk());
  EXPECT_EQ(PollOrFail(source_, kTaintNow), std::nullopt);
}

TEST_F(NodeTaintSourceTest, TaintAddedLater_IsSeenOnTheNextPoll) {
  ASSERT_THAT(client_.Create(kNodes, "", Node("gpu-node-1", "{}")), IsOk());
  ASSERT_EQ(PollOrFail(source_, kTaintNow), std::nullopt);
  ASSERT_THAT(client_.Patch(kNodes, "", "gpu-node-1", kube::PatchType::kMerge,
                            kube::Json::parse(R"({"spec": {"taints": [
                                {"key": "cloud.google.com/impending-node-termination",
                                 "effect": "NoSchedule"}]}})"),
                            {}),
              IsOk());
  const std::optional<NodeNotice> notice = PollOrFail(source_, kTaintNow + absl::Seconds(1));
  ASSERT_TRUE(notice.has_value());
  EXPECT_EQ(notice->kind, "preemption");
}

TEST_F(NodeTaintSourceTest, TheAgentsOwnMarker_IsNotANotice) {
  NodeTaintSource source{client_, "gpu-node-1", {"gce-metadata", "node-taint"}};
  ASSERT_THAT(client_.Create(kNodes, "", Node("gpu-node-1", R"({"taints": [
      {"key": "phalanx.dev/preempting", "value": "gce-metadata", "effect": "NoSchedule"}]})")),
              IsOk());
  EXPECT_EQ(PollOrFail(source, kTaintNow), std::nullopt);
  // Someone else's marker (a test, an operator by hand) still is.
  ASSERT_THAT(client_.Delete(kNodes, "", "gpu-node-1", {}), IsOk());
  ASSERT_THAT(client_.Create(kNodes, "", Node("gpu-node-1", R"({"taints": [
      {"key": "phalanx.dev/preempting", "value": "by-hand", "effect": "NoSchedule"}]})")),
              IsOk());
  EXPECT_NE(PollOrFail(source, kTaintNow), std::nullopt);
}

TEST_F(NodeTaintSourceTest, ApiErrors_AreReturned) {
  EXPECT_THAT(source_.Poll(kTaintNow), StatusIs(absl::StatusCode::kNotFound));
  ASSERT_THAT(client_.Create(kNodes, "", Node("gpu-node-1", "{}")), IsOk());
  client_.FailNext(1, absl::UnavailableError("injected 503"));
  EXPECT_THAT(source_.Poll(kTaintNow), StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_EQ(PollOrFail(source_, kTaintNow), std::nullopt);
}

}  // namespace
}  // namespace phalanx::agent
