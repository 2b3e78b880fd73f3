// Failures are classified right and the user can read why, on the local cluster (issue 13
// part C): a command that does not exist, a worker that prints its error and exits 1, and an
// image reference that cannot be parsed each end the job with the pod's own words in
// status.tasks[].lastFailureMessage and the job's Events; a task whose process is killed is
// classified by its pod's exit code even though the coordinator reports it first.
#include "tests/e2e/operator_e2e_fixture.h"

namespace phalanx::e2e {
namespace {

using ::testing::HasSubstr;

class FailureMessageE2eTest : public OperatorE2eTest {
 protected:
  // A one-task job `name` whose container is `container` (JSON, without its name).
  absl::Status CreateOneTaskJob(const std::string& name, const std::string& failure_policy,
                                const std::string& container) {
    kube::Json job = kube::Json::parse(absl::StrCat(
        R"({"apiVersion":"phalanx.dev/v1alpha1","kind":"TrainingJob","metadata":{"name":")", name,
        R"("},"spec":{"replicas":1,"failurePolicy":)", failure_policy,
        R"(,"template":{"spec":{"terminationGracePeriodSeconds":1,"containers":[{"name":"w",)",
        container, "}]}}}}"));
    return client_->Create(op::kTrainingJobs, ns_, job).status();
  }

  kube::Json JobNamed(const std::string& name) {
    absl::StatusOr<kube::Json> job = client_->Get(op::kTrainingJobs, ns_, name);
    return job.ok() ? *job : kube::Json::null();
  }

  // "reason: message" of every Event about job `name`.
  std::vector<std::string> EventsOf(const std::string& name) {
    std::vector<std::string> out;
    absl::StatusOr<kube::ObjectList> events = client_->List(
        {"", "v1", "events", true}, ns_, {.field_selector = "involvedObject.name=" + name});
    if (!events.ok()) return out;
    for (const kube::Json& e : events->items) {
      out.push_back(kube::StringAt(e, "reason") + ": " + kube::StringAt(e, "message"));
    }
    return out;
  }

  bool HasEvent(const std::string& name, const std::string& reason, const std::string& text) {
    for (const std::string& e : EventsOf(name)) {
      if (absl::StartsWith(e, reason + ": ") && absl::StrContains(e, text)) return true;
    }
    return false;
  }

  static std::string TaskField(const kube::Json& job, const std::string& field) {
    const kube::Json& tasks = kube::ArrayOrEmpty(kube::FieldOrNull(job, "status"), "tasks");
    return tasks.size() > 0 ? kube::StringAt(tasks.at(0), field) : "";
  }
};

TEST_F(FailureMessageE2eTest, ThePodsOwnWordsAreOnTheJob) {
  const std::string once = R"({"maxRestarts":1,"backoff":{"baseSeconds":1,"maxSeconds":1}})";
  ASSERT_OK_JOB(
      CreateOneTaskJob("nocmd", once, R"("image":"x","command":["no-such-trainer","--lr=3"])"));
  ASSERT_OK_JOB(CreateOneTaskJob("printexit", R"({"maxRestarts":0})",
                                 R"("image":"x","command":["/bin/sh","-c",
          "echo loading shard 7; echo 'ValueError: shard 7 is corrupt' >&2; exit 1"])"));
  ASSERT_OK_JOB(CreateOneTaskJob("badimage", "{}",
                                 R"("image":"Team/Trainer:v1","command":["/bin/sleep","60"])"));
  for (const std::string name : {"nocmd", "printexit", "badimage"}) {
    ASSERT_TRUE(
        Eventually([&] { return kube::StringAt(JobNamed(name), "status.phase") == "Failed"; },
                   absl::Seconds(120)))
        << name << ": " << JobNamed(name).serialize();
  }

  // (The operator writes a pass's status before its Events: an Event may come a moment after
  // the phase it explains, hence Eventually.)
  // A command that does not exist: the runtime's message, on the restart and on the failure.
  const kube::Json nocmd = JobNamed("nocmd");
  EXPECT_THAT(TaskField(nocmd, "lastFailureMessage"),
              HasSubstr("\"no-such-trainer\": executable file not found"))
      << nocmd.serialize();
  EXPECT_EQ(TaskField(nocmd, "lastFailureReason"), "ContainerCannotRun");
  EXPECT_TRUE(
      Eventually([&] { return HasEvent("nocmd", "TaskRestarted", "executable file not found"); },
                 absl::Seconds(30)))
      << ::testing::PrintToString(EventsOf("nocmd"));
  EXPECT_TRUE(Eventually(
      [&] { return HasEvent("nocmd", "MaxRestartsExceeded", "executable file not found"); },
      absl::Seconds(30)))
      << ::testing::PrintToString(EventsOf("nocmd"));

  // A worker that says what went wrong and exits 1: its log's last lines (FallbackToLogsOnError).
  const kube::Json printexit = JobNamed("printexit");
  EXPECT_THAT(TaskField(printexit, "lastFailureMessage"),
              HasSubstr("ValueError: shard 7 is corrupt"))
      << printexit.serialize();
  EXPECT_THAT(TaskField(printexit, "lastFailureMessage"), HasSubstr("loading shard 7"));
  EXPECT_TRUE(Eventually(
      [&] {
        return HasEvent("printexit", "MaxRestartsExceeded", "ValueError: shard 7 is corrupt");
      },
      absl::Seconds(30)))
      << ::testing::PrintToString(EventsOf("printexit"));

  // An image reference that cannot be parsed: the pod only waits; the job fails at once by the
  // default fatalReasons, with the kubelet's message.
  const kube::Json badimage = JobNamed("badimage");
  EXPECT_EQ(TaskField(badimage, "lastFailureReason"), "InvalidImageName") << badimage.serialize();
  EXPECT_THAT(TaskField(badimage, "lastFailureMessage"),
              HasSubstr("couldn't parse image reference \"Team/Trainer:v1\""));
  EXPECT_TRUE(Eventually([&] { return HasEvent("badimage", "FatalFailure", "InvalidImageName"); },
                         absl::Seconds(30)))
      << ::testing::PrintToString(EventsOf("badimage"));
  EXPECT_EQ(badimage.at("status").at("restarts").as_integer(), 0);
}

// The coordinator hears of a killed process first (its session breaks at once); the pod's
// Failed status follows when the kubelet reports it. The restart is classified by the pod's
// exit code, not as CoordinatorDeclaredFailed.
TEST_F(FailureMessageE2eTest, AKilledTaskIsClassifiedByItsExitCodeNotTheCoordinatorsReport) {
  ASSERT_OK_JOB(CreateJob(300));
  ASSERT_TRUE(Eventually([&] { return kube::StringAt(Job(), "status.phase") == "Running"; },
                         absl::Seconds(90)))
      << Job().serialize();
  ASSERT_TRUE(KillPod("train-task-1-0"));
  ASSERT_TRUE(Eventually([&] { return PodExists("train-task-1-1"); }, absl::Seconds(60)))
      << Job().serialize();
  const kube::Json job = Job();
  const kube::Json& task = job.at("status").at("tasks").at(1);
  EXPECT_EQ(kube::StringAt(task, "lastFailureReason"), "Error") << job.serialize();
  EXPECT_EQ(kube::FieldOrNull(task, "lastExitCode"), kube::Json::number(137)) << job.serialize();
}

}  // namespace
}  // namespace phalanx::e2e
