// DesiredCoordinatorPod with spec.coordinator and the operator's scheduling defaults (issue 13):
// Guaranteed resources, off nodes under a preemption notice, away from the job's tasks, and
// every user setting applied and merged.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "operator/api/codec.h"
#include "operator/controller/desired_state.h"

namespace phalanx::op {
namespace {

using ::testing::HasSubstr;

const Json kJob =
    Json::parse(R"({"apiVersion":"phalanx.dev/v1alpha1","kind":"TrainingJob",)"
                R"("metadata":{"name":"j","namespace":"ns","uid":"u1"},"spec":{"replicas":2}})");

// The spec of a job whose spec.coordinator is `coordinator` (a JSON object).
TrainingJobSpec SpecWith(const std::string& coordinator) {
  Json job = kJob;
  job["spec"]["template"] = Json::parse(R"({"spec":{"containers":[{"name":"w","image":"i"}]}})");
  job["spec"]["coordinator"] = Json::parse(coordinator);
  absl::StatusOr<TrainingJobSpec> spec = DecodeSpec(job);
  EXPECT_TRUE(spec.ok()) << spec.status();
  return spec.ok() ? *spec : TrainingJobSpec{};
}

const std::string kAntiAffinityToTasks =
    R"({"podAffinityTerm":{"labelSelector":{"matchLabels":{"phalanx.dev/job":"j",)"
    R"("phalanx.dev/role":"task"}},"topologyKey":"kubernetes.io/hostname"},"weight":100})";

TEST(DesiredCoordinatorPod, DefaultsAreGuaranteedAndAwayFromTheTasks) {
  const Json pod = DesiredCoordinatorPod(kJob, SpecWith("{}"), CoordinatorPlacement{}, "t");
  const Json& resources = pod.at("spec").at("containers").at(0).at("resources");
  // requests = limits for cpu and memory: QoS Guaranteed.
  EXPECT_EQ(resources.at("requests"), resources.at("limits"));
  EXPECT_EQ(resources.at("limits").at("cpu").as_string(), "100m");
  EXPECT_EQ(resources.at("limits").at("memory").as_string(), "256Mi");
  const Json& affinity = pod.at("spec").at("affinity");
  EXPECT_FALSE(affinity.has_field("nodeAffinity"));  // no node under a notice
  EXPECT_EQ(affinity.at("podAntiAffinity").serialize(),
            absl::StrCat(R"({"preferredDuringSchedulingIgnoredDuringExecution":[)",
                         kAntiAffinityToTasks, "]}"));
  for (const char* unset : {"nodeSelector", "tolerations", "serviceAccountName", "imagePullSecrets",
                            "priorityClassName"}) {
    EXPECT_FALSE(pod.at("spec").has_field(unset)) << unset;
  }
  EXPECT_FALSE(pod.at("metadata").has_field("annotations"));
}

TEST(DesiredCoordinatorPod, NodesUnderANoticeAreExcluded) {
  const Json pod = DesiredCoordinatorPod(kJob, SpecWith("{}"), CoordinatorPlacement{}, "t",
                                         {"node-1", "node-3"});
  EXPECT_EQ(pod.at("spec").at("affinity").at("nodeAffinity").serialize(),
            R"({"requiredDuringSchedulingIgnoredDuringExecution":{"nodeSelectorTerms":[)"
            R"({"matchExpressions":[{"key":"kubernetes.io/hostname","operator":"NotIn",)"
            R"("values":["node-1","node-3"]}]}]}})");
}

// The user's required terms are ORed: each gets the exclusion, or one term would let the pod
// onto a noticed node. Their preferences and own anti-affinity terms stay.
TEST(DesiredCoordinatorPod, TheUsersAffinityIsMergedWithTheOperatorsRules) {
  const TrainingJobSpec spec = SpecWith(
      R"({"affinity":{"nodeAffinity":{"requiredDuringSchedulingIgnoredDuringExecution":)"
      R"({"nodeSelectorTerms":[{"matchExpressions":[{"key":"pool","operator":"In","values":["a"]}]},)"
      R"({"matchFields":[{"key":"metadata.name","operator":"In","values":["n9"]}]}]},)"
      R"("preferredDuringSchedulingIgnoredDuringExecution":[{"weight":5,"preference":{}}]},)"
      R"("podAntiAffinity":{"preferredDuringSchedulingIgnoredDuringExecution":[{"weight":1,)"
      R"("podAffinityTerm":{"topologyKey":"zone"}}]},"podAffinity":{"x":1}}})");
  const Json pod = DesiredCoordinatorPod(kJob, spec, CoordinatorPlacement{}, "t", {"node-1"});
  const Json& affinity = pod.at("spec").at("affinity");
  const std::string not_in =
      R"({"key":"kubernetes.io/hostname","operator":"NotIn","values":["node-1"]})";
  const Json& terms = affinity.at("nodeAffinity")
                          .at("requiredDuringSchedulingIgnoredDuringExecution")
                          .at("nodeSelectorTerms");
  ASSERT_EQ(terms.size(), 2u);
  EXPECT_EQ(terms.at(0).at("matchExpressions").serialize(),
            absl::StrCat(R"([{"key":"pool","operator":"In","values":["a"]},)", not_in, "]"));
  EXPECT_EQ(terms.at(1).at("matchExpressions").serialize(), absl::StrCat("[", not_in, "]"));
  EXPECT_TRUE(terms.at(1).has_field("matchFields"));
  EXPECT_EQ(
      affinity.at("nodeAffinity").at("preferredDuringSchedulingIgnoredDuringExecution").size(), 1u);
  EXPECT_EQ(affinity.at("podAntiAffinity")
                .at("preferredDuringSchedulingIgnoredDuringExecution")
                .serialize(),
            absl::StrCat(R"([{"podAffinityTerm":{"topologyKey":"zone"},"weight":1},)",
                         kAntiAffinityToTasks, "]"));
  EXPECT_EQ(affinity.at("podAffinity").serialize(), R"({"x":1})");
}

TEST(DesiredCoordinatorPod, EveryUserSettingIsApplied) {
  TrainingJobSpec spec = SpecWith(
      R"({"nodeSelector":{"pool":"cpu"},"tolerations":[{"key":"pool","operator":"Exists"}],)"
      R"("resources":{"requests":{"cpu":"2","memory":"1Gi"}},"priorityClassName":"ctl",)"
      R"("imagePullSecrets":[{"name":"regcred"}],"serviceAccountName":"coord",)"
      R"("annotations":{"a":"b"}})");
  spec.priority_class_name = "tasks";  // the coordinator's own wins
  const Json pod = DesiredCoordinatorPod(kJob, spec, CoordinatorPlacement{}, "t");
  const Json& s = pod.at("spec");
  EXPECT_EQ(s.at("nodeSelector").serialize(), R"({"pool":"cpu"})");
  EXPECT_EQ(s.at("tolerations").serialize(), R"([{"key":"pool","operator":"Exists"}])");
  // A user's resources replace the defaults whole (no limit added behind their back).
  EXPECT_EQ(s.at("containers").at(0).at("resources").serialize(),
            R"({"requests":{"cpu":"2","memory":"1Gi"}})");
  EXPECT_EQ(s.at("priorityClassName").as_string(), "ctl");
  EXPECT_EQ(s.at("imagePullSecrets").serialize(), R"([{"name":"regcred"}])");
  EXPECT_EQ(s.at("serviceAccountName").as_string(), "coord");
  EXPECT_EQ(pod.at("metadata").at("annotations").serialize(), R"({"a":"b"})");
  // Ours stay: the token is still not automounted, labels still select it.
  EXPECT_FALSE(s.at("automountServiceAccountToken").as_bool());
  EXPECT_EQ(pod.at("metadata").at("labels").at("phalanx.dev/role").as_string(), "coordinator");
}

TEST(DesiredCoordinatorPod, TheJobsPriorityClassIsTheDefault) {
  TrainingJobSpec spec = SpecWith("{}");
  spec.priority_class_name = "tasks";
  const Json pod = DesiredCoordinatorPod(kJob, spec, CoordinatorPlacement{}, "t");
  EXPECT_EQ(pod.at("spec").at("priorityClassName").as_string(), "tasks");
}

}  // namespace
}  // namespace phalanx::op
