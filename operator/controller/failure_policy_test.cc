// Table tests of the failure stages (failure_policy.h): fatal failures, restart scope,
// maxRestarts, back-off, and the classification of failures.
#include "operator/controller/failure_policy.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <functional>

#include "operator/controller/plan_testing.h"

namespace phalanx::op {
namespace {

using namespace builders;  // NOLINT
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;

TEST(ClassifyFailure, Table) {
  struct Case {
    std::string name;
    std::vector<int> fatal, retryable;
    std::vector<std::string> fatal_reasons;
    std::optional<int> exit_code;
    std::string reason;
    FailureClass want;
  } cases[] = {
      {"anyExitIsRetryableByDefault", {}, {}, {}, 1, "Error", FailureClass::kRetryable},
      {"aFatalExitCode", {42}, {}, {}, 42, "Error", FailureClass::kFatal},
      {"outsideTheRetryableList", {}, {137, 143}, {}, 1, "Error", FailureClass::kFatal},
      {"inTheRetryableList", {}, {137, 143}, {}, 137, "Error", FailureClass::kRetryable},
      {"aFatalReason",
       {},
       {},
       {"ContainerCannotRun"},
       128,
       "ContainerCannotRun",
       FailureClass::kFatal},
      {"noExitCodeIsRetryable", {}, {137}, {}, std::nullopt, "", FailureClass::kRetryable},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    FailurePolicy policy;
    policy.fatal_exit_codes = c.fatal;
    policy.retryable_exit_codes = c.retryable;
    policy.fatal_reasons = c.fatal_reasons;
    PodView pod;
    pod.exit_code = c.exit_code;
    pod.reason = c.reason;
    EXPECT_EQ(ClassifyFailure(policy, pod), c.want);
  }
}

TEST(RestartBackoff, DoublesAndCaps) {
  const BackoffSpec b{absl::Seconds(10), absl::Seconds(35)};
  const std::pair<int, absl::Duration> cases[] = {{0, absl::ZeroDuration()},
                                                  {1, absl::Seconds(10)},
                                                  {2, absl::Seconds(20)},
                                                  {3, absl::Seconds(35)},
                                                  {30, absl::Seconds(35)}};
  for (const auto& [restarts, want] : cases) {
    SCOPED_TRACE(restarts);
    EXPECT_EQ(RestartBackoff(b, restarts), want);
  }
}

TEST(FailOnFatal, Table) {
  struct Case {
    std::string name;
    std::function<void(TestPass&)> given;
    Next want_next;
    std::string want_phase;
  };
  const Case cases[] = {
      {"noFailure", [](TestPass&) {}, Next::kContinue, kPhasePending},
      {"aRetryableFailure",
       [](TestPass& t) { t.world.task_pods[1] = PodBuilder("j", 1).Failed(1).Build(); },
       Next::kContinue, kPhasePending},
      {"aFatalFailureFailsTheJob",
       [](TestPass& t) {
         t.spec.failure_policy.fatal_exit_codes = {42};
         t.world.task_pods[1] = PodBuilder("j", 1).Failed(42).Build();
       },
       Next::kDone, kPhaseFailed},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    TestPass t(TrainingJobBuilder("j").Tasks(2));
    c.given(t);
    JobPass pass = t.Before("fatal");
    EXPECT_EQ(FailOnFatal(t.Inputs(), pass), c.want_next);
    EXPECT_EQ(pass.out.status.phase, c.want_phase);
    if (c.want_phase != kPhaseFailed) continue;
    EXPECT_EQ(ConditionOf(pass.out.status, "Failed"), "True/FatalFailure");
    ASSERT_EQ(pass.out.events.size(), 1u);
    EXPECT_THAT(pass.out.events[0].message, HasSubstr("task 1 pod j-task-1-0 exited with code 42"));
    EXPECT_THAT(pass.out.delete_pods, ElementsAreArray({"j-task-0-0", "j-coordinator"}));
    EXPECT_TRUE(pass.out.create.empty());
  }
}

TEST(RestartFailedTasks, Table) {
  struct Case {
    std::string name;
    std::function<void(TestPass&)> given;  // task 1 failed with exit code 1 (Error)
    Next want_next;
    std::string want_phase;  // "" when the stage leaves it
    std::vector<std::string> want_created;
    std::vector<std::string> want_deleted;
    int want_restarts;
    absl::Duration want_requeue = absl::ZeroDuration();
    std::vector<TaskState> want_states = {};
  };
  const Case cases[] = {
      {"taskScopeReplacesOnlyTheFailedTask",  // its failed pod is kept (keepFailedPods)
       [](TestPass&) {},
       Next::kContinue,
       "",
       {"j-task-1-1"},
       {},
       1},
      {"jobScopeReplacesEveryTaskForOneRestart",
       [](TestPass& t) { t.spec.failure_policy.restart_scope = RestartScope::kJob; },
       Next::kContinue,
       "",
       {"j-task-0-1", "j-task-1-1"},
       {"j-task-0-0"},
       1},
      {"backingOffWaitsAndSaysSo",
       [](TestPass& t) {
         t.spec.failure_policy.backoff = {absl::Seconds(10), absl::Seconds(60)};
         t.previous.restarts = 1;
         t.previous.last_restart_time = kNow - absl::Seconds(4);
       },
       Next::kDone,
       kPhaseRestarting,
       {},
       {},
       1,
       absl::Seconds(6),
       {TaskState::kRunning, TaskState::kBackingOff}},
      {"afterTheBackoffItRestarts",
       [](TestPass& t) {
         t.spec.failure_policy.backoff = {absl::Seconds(10), absl::Seconds(60)};
         t.previous.restarts = 1;
         t.previous.last_restart_time = kNow - absl::Seconds(10);
       },
       Next::kContinue,
       "",
       {"j-task-1-1"},
       {},
       2},
      // Issue 35 (7): the job trained (every task running) at least baseSeconds since its last
      // restart: not a crash loop, so the in-place recovery goes at once, however many restarts
      // came before and however recent the last one.
      {"progressSinceTheLastRestartWaivesTheBackoff",
       [](TestPass& t) {
         t.spec.failure_policy.backoff = {absl::Seconds(10), absl::Seconds(60)};
         t.spec.failure_policy.max_restarts = 10;
         t.previous.restarts = 5;
         t.previous.last_restart_time = kNow - absl::Seconds(30);
         t.previous.productive_at_last_restart = 100;
         t.previous.productive_seconds = 110;
       },
       Next::kContinue,
       "",
       {"j-task-1-1"},
       {},
       6},
      // Running time the accounting has not booked yet (it books every 30 s) is progress too: a
      // failure 15 s into a run after a restart is not a crash loop.
      {"progressNotBookedYetWaivesTheBackoff",
       [](TestPass& t) {
         t.spec.failure_policy.backoff = {absl::Seconds(10), absl::Seconds(60)};
         t.spec.failure_policy.max_restarts = 10;
         t.previous.restarts = 5;
         t.previous.phase = kPhaseRunning;
         t.previous.last_restart_time = kNow - absl::Seconds(30);
         t.previous.accounted_until = kNow - absl::Seconds(15);
         t.previous.productive_at_last_restart = 100;
         t.previous.productive_seconds = 100;
       },
       Next::kContinue,
       "",
       {"j-task-1-1"},
       {},
       6},
      // ...but only until the failure happened: a task that failed 3 s into the run and was
      // detected 12 s later (a heartbeat timeout) made no progress; it is a crash loop.
      {"unbookedTimeAfterTheFailureIsNoProgress",
       [](TestPass& t) {
         t.spec.failure_policy.backoff = {absl::Seconds(10), absl::Seconds(60)};
         t.spec.failure_policy.max_restarts = 10;
         t.previous.restarts = 5;
         t.previous.phase = kPhaseRunning;
         t.previous.last_restart_time = kNow - absl::Seconds(30);
         t.previous.accounted_until = kNow - absl::Seconds(15);
         t.previous.productive_at_last_restart = 100;
         t.previous.productive_seconds = 100;
         t.world.task_pods[1].finished_at = kNow - absl::Seconds(12);
       },
       Next::kDone,
       kPhaseRestarting,
       {},
       {},
       5,
       absl::Seconds(30),
       {TaskState::kRunning, TaskState::kBackingOff}},
      // ...and only from the last restart on, and only while Running.
      {"unbookedTimeBeforeTheLastRestartIsNoProgress",
       [](TestPass& t) {
         t.spec.failure_policy.backoff = {absl::Seconds(10), absl::Seconds(60)};
         t.spec.failure_policy.max_restarts = 10;
         t.previous.restarts = 5;
         t.previous.phase = kPhaseRunning;
         t.previous.last_restart_time = kNow - absl::Seconds(5);
         t.previous.accounted_until = kNow - absl::Seconds(25);
         t.previous.productive_at_last_restart = 100;
         t.previous.productive_seconds = 100;
       },
       Next::kDone,
       kPhaseRestarting,
       {},
       {},
       5,
       absl::Seconds(55),
       {TaskState::kRunning, TaskState::kBackingOff}},
      {"lessProgressThanBaseSecondsIsACrashLoop",
       [](TestPass& t) {
         t.spec.failure_policy.backoff = {absl::Seconds(10), absl::Seconds(60)};
         t.spec.failure_policy.max_restarts = 10;
         t.previous.restarts = 5;
         t.previous.last_restart_time = kNow - absl::Seconds(30);
         t.previous.productive_at_last_restart = 100;
         t.previous.productive_seconds = 109;
       },
       Next::kDone,
       kPhaseRestarting,
       {},
       {},
       5,
       absl::Seconds(30),
       {TaskState::kRunning, TaskState::kBackingOff}},
      {"maxRestartsExhaustedFailsTheJob",
       [](TestPass& t) {
         t.spec.failure_policy.max_restarts = 2;
         t.previous.restarts = 2;
       },
       Next::kDone,
       kPhaseFailed,
       {},
       {"j-task-0-0", "j-coordinator"},
       2},
      {"aPassThatMovedPreemptedTasksLeavesFailuresForTheNext",
       [](TestPass& t) {
         t.world.task_pods[0].disruption_target = true;
         t.previous.tasks.resize(2);
         t.previous.tasks[0].preempting_since = kNow - absl::Hours(1);
       },
       Next::kContinue,
       "",
       {"j-task-0-1"},
       {"j-task-0-0"},
       0},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    TestPass t(TrainingJobBuilder("j").Tasks(2));
    t.world.task_pods[1] = PodBuilder("j", 1).Failed(1, "Error").Build();
    c.given(t);
    JobPass pass = t.Before("failures");
    const std::string phase_before = pass.out.status.phase;
    EXPECT_EQ(RestartFailedTasks(t.Inputs(), pass), c.want_next);
    EXPECT_EQ(pass.out.status.phase, c.want_phase.empty() ? phase_before : c.want_phase);
    EXPECT_THAT(Names(pass.out.create), ElementsAreArray(c.want_created));
    EXPECT_THAT(pass.out.delete_pods, ElementsAreArray(c.want_deleted));
    EXPECT_EQ(pass.out.status.restarts, c.want_restarts);
    EXPECT_EQ(pass.out.requeue_after, c.want_requeue);
    for (size_t i = 0; i < c.want_states.size(); ++i) {
      EXPECT_EQ(pass.tasks[i].status.state, c.want_states[i]) << "task " << i;
    }
  }
}

TEST(RestartFailedTasks, RecordsTheFailureOnTheTaskAndForMetrics) {
  TestPass t(TrainingJobBuilder("j").Tasks(2));
  t.world.task_pods[1] = PodBuilder("j", 1).Failed(3, "Error").Build();
  t.previous.productive_seconds = 42;
  JobPass pass = t.Before("failures");
  RestartFailedTasks(t.Inputs(), pass);
  const TaskStatus& task = pass.tasks[1].status;
  EXPECT_EQ(task.incarnation, 1);
  EXPECT_EQ(task.restarts, 1);
  EXPECT_EQ(task.state, TaskState::kRestarting);
  EXPECT_EQ(task.last_failure_reason, "Error");
  EXPECT_EQ(task.last_exit_code, 3);
  EXPECT_EQ(task.pod, "j-task-1-1");
  EXPECT_EQ(pass.out.status.last_restart_time, kNow);
  EXPECT_EQ(pass.out.status.productive_at_last_restart, 42) << "the progress starts from here";
  EXPECT_THAT(pass.out.replacements, ElementsAreArray({Replacement{1, false, "Error"}}));
  ASSERT_EQ(pass.out.events.size(), 1u);
  EXPECT_EQ(pass.out.events[0].message,
            "task 1 pod j-task-1-0 exited with code 3 (Error); restarting it as incarnation 1");
}

// The kubelet's FallbackToLogsOnError message is the log's last lines: the Event reads as one
// line (kubectl get events prints it in a table), the task's status keeps the lines.
TEST(RestartFailedTasks, AManyLineMessageIsOneLineInTheEventAndWholeInTheStatus) {
  TestPass t(TrainingJobBuilder("j").Tasks(2));
  const std::string log = "step=20 checkpoint\n  step=40 checkpoint  \n\nloss is NaN\n";
  t.world.task_pods[1] = PodBuilder("j", 1).Failed(1, "Error").Message(log).Build();
  JobPass pass = t.Before("failures");
  RestartFailedTasks(t.Inputs(), pass);
  EXPECT_EQ(pass.tasks[1].status.last_failure_message, log);
  ASSERT_EQ(pass.out.events.size(), 1u);
  EXPECT_EQ(pass.out.events[0].message,
            "task 1 pod j-task-1-0 exited with code 1 (Error): step=20 checkpoint | step=40 "
            "checkpoint | loss is NaN; restarting it as incarnation 1");
}

}  // namespace
}  // namespace phalanx::op
