// Credentials bound to a task pod's incarnation (ADR 0006): the pod's own Secret and how the pod
// mounts it.
#include "operator/controller/task_credentials.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "common/auth/credentials.h"
#include "common/kube/object_meta.h"
#include "operator/controller/desired_state.h"

namespace phalanx::op {
namespace {

Json CredentialJob() {
  return Json::parse(
      R"({"apiVersion":"phalanx.dev/v1alpha1","kind":"TrainingJob","metadata":{"name":"j",
          "namespace":"ns","uid":"u1"},"spec":{"replicas":2}})");
}

TrainingJobSpec CredentialSpec(int nproc_per_node) {
  TrainingJobSpec spec;
  spec.replicas = 2;
  spec.nproc_per_node = nproc_per_node;
  spec.pod_template =
      Json::parse(R"({"spec":{"containers":[{"name":"main","image":"x","command":["train"]}]}})");
  return spec;
}

TEST(TaskCredentials, APodsSecret_HoldsItsTasksCredentialForItsIncarnationOnly_OwnedByThePod) {
  const Json secret = DesiredTaskCredentialSecret(CredentialJob(), CredentialSpec(1),
                                                  {"j-task-1-3", "pod-uid", 1, 3}, "job-token");
  EXPECT_EQ(kube::MetaString(secret, "name"), "j-task-1-3");
  EXPECT_EQ(secret.at("stringData").size(), 1u);
  EXPECT_EQ(secret.at("stringData").at("token").as_string(),
            auth::TaskCredential("job-token", 1, 3, 3));
  const Json& owner = secret.at("metadata").at("ownerReferences").at(0);
  EXPECT_EQ(owner.at("kind").as_string(), "Pod");
  EXPECT_EQ(owner.at("uid").as_string(), "pod-uid");
  EXPECT_FALSE(owner.has_field("blockOwnerDeletion"));  // needs no right over the pod
  EXPECT_EQ(kube::LabelsOf(secret)[kJobLabel], "j");
  // Authenticated, it is task 1 at incarnation 3 and nothing else.
  absl::StatusOr<auth::Principal> principal =
      auth::Authenticate("job-token", secret.at("stringData").at("token").as_string());
  ASSERT_TRUE(principal.ok());
  EXPECT_EQ(principal->task_id, 1);
  EXPECT_EQ(principal->min_incarnation, 3);
  EXPECT_EQ(principal->max_incarnation, 3);
}

TEST(TaskCredentials, WithSeveralRanksAPod_EachLocalTaskGetsTheLaunchersRangeOfTheIncarnation) {
  const Json secret = DesiredTaskCredentialSecret(CredentialJob(), CredentialSpec(2),
                                                  {"j-task-1-3", "pod-uid", 1, 3}, "job-token");
  // Pod 1 runs tasks 2 and 3; its in-place restarts are 3000..3999 (kLocalIncarnationStride).
  EXPECT_EQ(secret.at("stringData").size(), 2u);
  EXPECT_EQ(secret.at("stringData").at("token-2").as_string(),
            auth::TaskCredential("job-token", 2, 3000, 3999));
  EXPECT_EQ(secret.at("stringData").at("token-3").as_string(),
            auth::TaskCredential("job-token", 3, 3000, 3999));
  EXPECT_THAT(TaskCredentialFiles(CredentialSpec(2), 1),
              ::testing::ElementsAre(std::pair<std::string, std::string>("token-2", "token-2"),
                                     std::pair<std::string, std::string>("token-3", "token-3")));
}

TEST(TaskCredentials, AReplacementMountsItsOwnSecret_TheFirstPodTheJobsSecret) {
  const Json pod = DesiredTaskPod(CredentialJob(), CredentialSpec(1), 1, 3, "c:1", 0, false,
                                  /*bound_credentials=*/true);
  const std::string serialized = pod.serialize();
  EXPECT_THAT(
      serialized,
      ::testing::HasSubstr(
          R"("secret":{"defaultMode":292,"items":[{"key":"token","path":"token"}],"secretName":"j-task-1-3"})"));
  EXPECT_THAT(serialized, ::testing::Not(::testing::HasSubstr(R"("key":"task-1")")));
  // The first pod of a task (incarnation 0) finds its credential, bound to 0, in the job's
  // Secret: creating a job costs no request more.
  const Json secret = DesiredSecret(CredentialJob(), CredentialSpec(1), "job-token", "", nullptr,
                                    /*bound_credentials=*/true);
  EXPECT_EQ(secret.at("stringData").at(TaskCredentialKey(1)).as_string(),
            auth::TaskCredential("job-token", 1, 0, 0));
  EXPECT_TRUE(secret.at("stringData").has_field(kSpareCredentialKey));  // spares keep theirs
  const std::string first =
      DesiredTaskPod(CredentialJob(), CredentialSpec(1), 1, 0, "c:1", 0, false, true).serialize();
  EXPECT_THAT(first, ::testing::HasSubstr(R"({"key":"task-1","path":"token"})"));
  EXPECT_THAT(first, ::testing::HasSubstr(R"("secretName":"j-token")"));
  // Unbound (a job of an operator from before): as it was.
  EXPECT_EQ(DesiredSecret(CredentialJob(), CredentialSpec(1), "job-token")
                .at("stringData")
                .at("task-1")
                .as_string(),
            auth::TaskCredential("job-token", 1));
}

TEST(TaskCredentials, APodWithoutItsUidOrLabels_HasNoRef) {
  EXPECT_FALSE(TaskPodRefOf(Json::parse(R"({"metadata":{"name":"p"}})")).ok());
  absl::StatusOr<TaskPodRef> ref = TaskPodRefOf(Json::parse(
      R"({"metadata":{"name":"p","uid":"u","labels":{"phalanx.dev/task":"2","phalanx.dev/incarnation":"5"}}})"));
  ASSERT_TRUE(ref.ok());
  EXPECT_EQ(ref->index, 2);
  EXPECT_EQ(ref->incarnation, 5);
}

TEST(TaskCredentials, AJobKeepsWhatItsSecretWasWrittenWith) {
  TrainingJobStatus status;
  EXPECT_TRUE(JobUsesBoundCredentials(status, /*has_children=*/false));  // a new job
  EXPECT_FALSE(JobUsesBoundCredentials(status, /*has_children=*/true));  // an older operator's
  status.incarnation_bound_credentials = true;
  EXPECT_TRUE(JobUsesBoundCredentials(status, true));
}

}  // namespace
}  // namespace phalanx::op
