// Failed pods are kept (failurePolicy.keepFailedPods) on the local cluster: a task that exits 1
// once is replaced, and its failed pod stays with its log (kubectl logs through the API
// server's pods/log) until the job is deleted; with keepFailedPods 0 it is deleted at the
// restart. The finished job shows terminal task states, RESTARTS equal to the restarts spent and
// Suspended=False reason NotSuspended.
#include "tests/e2e/operator_e2e_fixture.h"

namespace phalanx::e2e {
namespace {

class FailedPodsE2eTest : public OperatorE2eTest {
 protected:
  // A one-task job whose first incarnation prints a line and exits 1, and whose second exits 0.
  absl::Status CreateCrashOnceJob(const std::string& name, int keep_failed_pods) {
    kube::Json job = kube::Json::parse(absl::StrCat(
        R"({"apiVersion":"phalanx.dev/v1alpha1","kind":"TrainingJob","metadata":{"name":")", name,
        R"("},"spec":{"replicas":1,"failurePolicy":{"maxRestarts":2,"keepFailedPods":)",
        keep_failed_pods, R"(,"backoff":{"baseSeconds":1,"maxSeconds":1}},
            "template":{"spec":{"containers":[{"name":"w","image":"x","command":["/bin/sh","-c",
              "echo crash-of-incarnation-$PHALANX_INCARNATION; [ \"$PHALANX_INCARNATION\" = 0 ] && exit 1; exit 0"]}]}}}})"));
    return client_->Create(op::kTrainingJobs, ns_, job).status();
  }

  kube::Json JobNamed(const std::string& name) {
    absl::StatusOr<kube::Json> job = client_->Get(op::kTrainingJobs, ns_, name);
    return job.ok() ? *job : kube::Json::null();
  }

  static std::string ConditionReason(const kube::Json& job, const std::string& type) {
    for (const kube::Json& c :
         kube::ArrayOrEmpty(kube::FieldOrNull(job, "status"), "conditions").as_array()) {
      if (kube::StringAt(c, "type") == type) {
        return kube::StringAt(c, "status") + "/" + kube::StringAt(c, "reason");
      }
    }
    return "none";
  }
};

TEST_F(FailedPodsE2eTest, AFailedPodIsKeptWithItsLogUntilTheJobIsDeleted) {
  ASSERT_OK_JOB(CreateCrashOnceJob("keep", 3));
  ASSERT_OK_JOB(CreateCrashOnceJob("nokeep", 0));
  for (const std::string name : {"keep", "nokeep"}) {
    ASSERT_TRUE(
        Eventually([&] { return kube::StringAt(JobNamed(name), "status.phase") == "Succeeded"; },
                   absl::Seconds(120)))
        << JobNamed(name).serialize();
    const kube::Json done = JobNamed(name);
    EXPECT_EQ(done.at("status").at("restarts").as_integer(), 1) << done.serialize();
    EXPECT_EQ(kube::StringAt(done.at("status").at("tasks").at(0), "state"), "Succeeded");
    EXPECT_EQ(ConditionReason(done, "Suspended"), "False/NotSuspended");
  }

  // keepFailedPods 3: incarnation 0's pod is still there, Failed, and its log is readable.
  absl::StatusOr<kube::Json> kept = client_->Get(op::kPods, ns_, "keep-task-0-0");
  ASSERT_TRUE(kept.ok()) << kept.status();
  EXPECT_EQ(kube::StringAt(*kept, "status.phase"), "Failed");
  absl::StatusOr<std::string> log =
      client_->Raw("GET", absl::StrCat("/api/v1/namespaces/", ns_, "/pods/keep-task-0-0/log"));
  ASSERT_TRUE(log.ok()) << log.status();
  EXPECT_THAT(*log, ::testing::HasSubstr("crash-of-incarnation-0"));
  EXPECT_TRUE(PodExists("keep-task-0-1"));  // the replacement, Succeeded

  // keepFailedPods 0: deleted when its task was replaced (as before).
  EXPECT_TRUE(Eventually([&] { return !PodExists("nokeep-task-0-0"); }, absl::Seconds(30)));

  // Deleting the job deletes the kept pod (controller owner reference, garbage collection).
  ASSERT_TRUE(client_->Delete(op::kTrainingJobs, ns_, "keep", {}).ok());
  EXPECT_TRUE(Eventually([&] { return !PodExists("keep-task-0-0"); }, absl::Seconds(90)));
}

}  // namespace
}  // namespace phalanx::e2e
