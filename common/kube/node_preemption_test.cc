#include "common/kube/node_preemption.h"

#include <gtest/gtest.h>

#include <optional>
#include <string>

namespace phalanx::kube {
namespace {

TEST(NodePreemptionTest, TaintKeysAreClassified) {
  struct Case {
    const char* key;
    bool preemption;
  };
  const Case cases[] = {
      {"cloud.google.com/impending-node-termination", true},
      {"aws-node-termination-handler/spot-itn", true},
      {"aws-node-termination-handler/scheduled-maintenance", true},
      {"node.kubernetes.io/unschedulable", true},
      {"ToBeDeletedByClusterAutoscaler", true},
      {"phalanx.dev/preempting", true},
      {"nvidia.com/gpu", false},
      {"node.kubernetes.io/not-ready", false},
      {"node.kubernetes.io/unreachable", false},
      {"tobedeletedbyclusterautoscaler", false},
      {"", false},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.key);
    EXPECT_EQ(IsPreemptionTaint(c.key), c.preemption);
  }
}

TEST(NodePreemptionTest, NodesAreClassifiedByTaintsAndCordon) {
  struct Case {
    const char* name;
    const char* node;
    std::optional<std::string> taint;
    bool preempted;
  };
  const Case cases[] = {
      {"plain node", R"({"metadata": {"name": "n"}, "spec": {}})", std::nullopt, false},
      {"no spec", R"({"metadata": {"name": "n"}})", std::nullopt, false},
      {"not an object", R"("n")", std::nullopt, false},
      {"unrelated taint",
       R"({"spec": {"taints": [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}]}})", std::nullopt,
       false},
      {"gke termination taint",
       R"({"spec": {"taints": [{"key": "nvidia.com/gpu", "effect": "NoSchedule"},
           {"key": "cloud.google.com/impending-node-termination", "effect": "NoSchedule"}]}})",
       "cloud.google.com/impending-node-termination", true},
      {"first matching taint wins",
       R"({"spec": {"taints": [{"key": "ToBeDeletedByClusterAutoscaler"},
           {"key": "phalanx.dev/preempting"}]}})",
       "ToBeDeletedByClusterAutoscaler", true},
      {"cordoned without taint", R"({"spec": {"unschedulable": true}})", std::nullopt, true},
      {"unschedulable false", R"({"spec": {"unschedulable": false}})", std::nullopt, false},
      {"unschedulable mistyped", R"({"spec": {"unschedulable": "true"}})", std::nullopt, false},
      {"taints mistyped", R"({"spec": {"taints": {"key": "phalanx.dev/preempting"}}})",
       std::nullopt, false},
      {"taint without key", R"({"spec": {"taints": [{"effect": "NoSchedule"}, 3]}})", std::nullopt,
       false},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const Json node = Json::parse(c.node);
    EXPECT_EQ(PreemptionTaintOf(node), c.taint);
    EXPECT_EQ(NodeIsBeingPreempted(node), c.preempted);
  }
}

}  // namespace
}  // namespace phalanx::kube
