// spec.placement on the task pods (placement.h): the terms the scheduler reads.
#include "operator/controller/placement.h"

#include <gtest/gtest.h>

#include "operator/controller/desired_state.h"

namespace phalanx::op {
namespace {

Json PlacedJob() {
  return Json::parse(R"({"apiVersion":"phalanx.dev/v1alpha1","kind":"TrainingJob",
      "metadata":{"name":"j","namespace":"ns","uid":"u1"},"spec":{"replicas":2}})");
}

TrainingJobSpec SpecWithTemplate(const std::string& template_spec) {
  TrainingJobSpec spec;
  spec.replicas = 2;
  spec.pod_template = Json::parse(template_spec);
  return spec;
}

constexpr char kPlainTemplate[] = R"({"spec":{"containers":[{"name":"main","image":"x"}]}})";
constexpr char kOwnJobTerm[] =
    R"({"labelSelector":{"matchExpressions":[{"key":"phalanx.dev/job","operator":"In",)"
    R"("values":["j"]},{"key":"phalanx.dev/role","operator":"In","values":["task"]}]},)"
    R"("topologyKey":"example.dev/rack"})";
constexpr char kOtherJobsTerm[] =
    R"({"labelSelector":{"matchExpressions":[{"key":"phalanx.dev/job","operator":"Exists"},)"
    R"({"key":"phalanx.dev/job","operator":"NotIn","values":["j"]},)"
    R"({"key":"phalanx.dev/role","operator":"In","values":["task"]}]},)"
    R"("topologyKey":"example.dev/rack"})";
constexpr char kOtherNamespacesTerm[] =
    R"({"labelSelector":{"matchExpressions":[{"key":"phalanx.dev/job","operator":"Exists"},)"
    R"({"key":"phalanx.dev/role","operator":"In","values":["task"]}]},)"
    R"("namespaceSelector":{"matchExpressions":[{"key":"kubernetes.io/metadata.name",)"
    R"("operator":"NotIn","values":["ns"]}]},"topologyKey":"example.dev/rack"})";

TEST(TaskPlacement, KeepsEveryTaskPodWithItsJobInOneDomain) {
  TrainingJobSpec spec = SpecWithTemplate(kPlainTemplate);
  spec.placement.topology_key = "example.dev/rack";
  const Json pod = DesiredTaskPod(PlacedJob(), spec, 1, 0, "c:1");
  const Json& affinity = pod.at("spec").at("affinity");
  EXPECT_EQ(affinity.at("podAffinity").at("requiredDuringSchedulingIgnoredDuringExecution"),
            Json::parse(std::string("[") + kOwnJobTerm + "]"));
  EXPECT_FALSE(affinity.has_field("podAntiAffinity")) << affinity.serialize();
  // The pod matches its own term, which is what lets the first one go anywhere.
  EXPECT_EQ(pod.at("metadata").at("labels").at(kJobLabel), Json::string("j"));
  EXPECT_EQ(pod.at("metadata").at("labels").at(kRoleLabel), Json::string("task"));
}

TEST(TaskPlacement, ExclusiveKeepsEveryOtherJobsTaskPodsOutAndTheTemplatesRulesStay) {
  TrainingJobSpec spec = SpecWithTemplate(R"({"spec":{"containers":[{"name":"main","image":"x"}],
      "affinity":{"nodeAffinity":{"requiredDuringSchedulingIgnoredDuringExecution":
                    {"nodeSelectorTerms":[{"matchExpressions":[{"key":"gpu","operator":"Exists"}]}]}},
                  "podAffinity":{"preferredDuringSchedulingIgnoredDuringExecution":
                    [{"weight":10,"podAffinityTerm":{"labelSelector":{"matchLabels":{"app":"cache"}},
                      "topologyKey":"zone"}}]}}}})");
  spec.placement = {.topology_key = "example.dev/rack", .exclusive = true};
  const Json affinity = DesiredTaskPod(PlacedJob(), spec, 0, 0, "c:1").at("spec").at("affinity");
  const Json& tmpl = spec.pod_template.at("spec").at("affinity");
  EXPECT_EQ(affinity.at("nodeAffinity"), tmpl.at("nodeAffinity"));
  EXPECT_EQ(affinity.at("podAffinity").at("preferredDuringSchedulingIgnoredDuringExecution"),
            tmpl.at("podAffinity").at("preferredDuringSchedulingIgnoredDuringExecution"));
  EXPECT_EQ(affinity.at("podAffinity").at("requiredDuringSchedulingIgnoredDuringExecution"),
            Json::parse(std::string("[") + kOwnJobTerm + "]"));
  // Other jobs of this namespace, and every job of any other namespace (one of the same name
  // there included).
  EXPECT_EQ(affinity.at("podAntiAffinity").at("requiredDuringSchedulingIgnoredDuringExecution"),
            Json::parse(std::string("[") + kOtherJobsTerm + "," + kOtherNamespacesTerm + "]"));
}

TEST(TaskPlacement, WithoutATopologyKeyTheTemplatesAffinityIsUntouched) {
  const TrainingJobSpec spec =
      SpecWithTemplate(R"({"spec":{"containers":[{"name":"main","image":"x"}],
      "affinity":{"podAntiAffinity":{"preferredDuringSchedulingIgnoredDuringExecution":[]}}}})");
  EXPECT_EQ(DesiredTaskPod(PlacedJob(), spec, 0, 0, "c:1").at("spec").at("affinity"),
            spec.pod_template.at("spec").at("affinity"));
  EXPECT_FALSE(DesiredTaskPod(PlacedJob(), SpecWithTemplate(kPlainTemplate), 0, 0, "c:1")
                   .at("spec")
                   .has_field("affinity"));
}

}  // namespace
}  // namespace phalanx::op
