// Table test of the task-state stage (task_state.h): each task's state and event from its pod.
#include "operator/controller/task_state.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <functional>

#include "operator/controller/plan_testing.h"
#include "operator/controller/waiting_failure.h"

namespace phalanx::op {
namespace {

using namespace builders;  // NOLINT
using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(ClassifyTask, Table) {
  const absl::Time node_deadline = kNow + absl::Seconds(20);
  struct Case {
    std::string name;
    std::function<void(TestPass&)> given;  // task 0's pod starts Running and ready on node-0
    TaskState want_state;
    TaskEvent want_event;
    std::string want_preemption_reason = "";
    std::string want_failure_reason = "";
    absl::Time want_node_deadline = absl::InfiniteFuture();
    std::optional<absl::Time> want_since = std::nullopt;
  };
  PodView& (*pod0)(TestPass&) = [](TestPass& t) -> PodView& { return t.world.task_pods[0]; };
  auto ran = [](TestPass& t, TaskState state) {
    t.previous.tasks.resize(2);
    t.previous.tasks[0].pod = "j-task-0-0";
    t.previous.tasks[0].state = state;
    t.world.task_pods.erase(t.world.task_pods.begin());
  };
  const Case cases[] = {
      {"running", [](TestPass&) {}, TaskState::kRunning, TaskEvent::kNone},
      {"pending", [&](TestPass& t) { pod0(t).phase = PodPhase::kPending; }, TaskState::kPending,
       TaskEvent::kNone},
      {"succeeded", [&](TestPass& t) { pod0(t).phase = PodPhase::kSucceeded; },
       TaskState::kSucceeded, TaskEvent::kNone},
      {"failed", [&](TestPass& t) { pod0(t) = PodBuilder("j", 0).Failed(1, "Error").Build(); },
       TaskState::kUnknown, TaskEvent::kFailed, "", "Error"},
      {"failedFatally",
       [&](TestPass& t) {
         t.spec.failure_policy.fatal_exit_codes = {42};
         pod0(t) = PodBuilder("j", 0).Failed(42).Build();
       },
       TaskState::kUnknown, TaskEvent::kFatal},
      {"aCoordinatorReportOfAnOlderIncarnationIsIgnored",
       [](TestPass& t) {
         t.world.coordinator_failed[0] = {0, "old"};
         t.world.task_pods[0] = PodBuilder("j", 0, 1).Build();
       },
       TaskState::kRunning, TaskEvent::kNone},
      {"onAPreemptedNode", [&](TestPass& t) { t.world.preempting_nodes["node-0"] = node_deadline; },
       TaskState::kUnknown, TaskEvent::kPreempted, "NodePreempted", "", node_deadline},
      {"nodeTaintsIgnoredByPolicy",
       [](TestPass& t) {
         t.spec.preemption.on_node_taints = false;
         t.world.preempting_nodes["node-0"] = absl::InfiniteFuture();
       },
       TaskState::kRunning, TaskEvent::kNone},
      {"disrupted", [&](TestPass& t) { pod0(t).disruption_target = true; }, TaskState::kUnknown,
       TaskEvent::kPreempted, "DisruptionTarget"},
      {"evicted", [&](TestPass& t) { pod0(t) = PodBuilder("j", 0).Failed({}, "Evicted").Build(); },
       TaskState::kUnknown, TaskEvent::kPreempted, "Evicted"},
      {"exitedWhileBeingPreempted",
       [&](TestPass& t) {
         t.previous.tasks.resize(2);
         t.previous.tasks[0].preempting_since = kNow - absl::Seconds(3);
         pod0(t) = PodBuilder("j", 0).Failed(4).Build();
       },
       TaskState::kUnknown, TaskEvent::kPreempted, "Evicted", "", absl::InfiniteFuture(),
       kNow - absl::Seconds(3)},
      {"beingDeletedAfterADisruptionStartsThePreemptionClock",
       [&](TestPass& t) { pod0(t).being_deleted = pod0(t).disruption_target = true; },
       TaskState::kTerminating, TaskEvent::kNone, "", "", absl::InfiniteFuture(), kNow},
      {"beingDeletedOnAPreemptedNodeKnowsTheNodesDeadline",
       [&](TestPass& t) {
         pod0(t).being_deleted = true;
         t.world.preempting_nodes["node-0"] = node_deadline;
       },
       TaskState::kTerminating, TaskEvent::kNone, "", "", node_deadline},
      {"noPodYet", [](TestPass& t) { t.world.task_pods.erase(t.world.task_pods.begin()); },
       TaskState::kPending, TaskEvent::kNoPod},
      {"aPodThatRanVanished", [&](TestPass& t) { ran(t, TaskState::kRunning); },
       TaskState::kRunning, TaskEvent::kFailed, "", "PodDeleted"},
      {"aPreemptedPodThatRanIsGone",
       [&](TestPass& t) {
         ran(t, TaskState::kTerminating);
         t.previous.tasks[0].preempting_since = kNow - absl::Seconds(1);
       },
       TaskState::kTerminating, TaskEvent::kPreemptedAndGone, "Evicted", "", absl::InfiniteFuture(),
       kNow - absl::Seconds(1)},
      {"aPodCreatedButNotSeenYetIsNotVanished", [&](TestPass& t) { ran(t, TaskState::kPending); },
       TaskState::kPending, TaskEvent::kNoPod},
      // The coordinator's report arrives before the pod's terminal status: wait for it.
      {"declaredFailedWhileThePodRunsAwaitsItsExit",
       [](TestPass& t) {
         t.world.coordinator_failed[0] = {0, "session broken"};
       },
       TaskState::kAwaitingExit, TaskEvent::kNone},
      {"declaredFailedAndThePodFailedClassifiesByThePod",
       [&](TestPass& t) {
         t.world.coordinator_failed[0] = {0, "session broken"};
         t.spec.failure_policy.fatal_reasons = {"OOMKilled"};
         pod0(t) = PodBuilder("j", 0).Failed(137, "OOMKilled").Build();
       },
       TaskState::kUnknown, TaskEvent::kFatal, "", "OOMKilled"},
      {"declaredFailedPastTheExitStatusWait",
       [](TestPass& t) {
         t.world.coordinator_failed[0] = {0, "heartbeat timeout"};
         t.previous.tasks.resize(2);
         t.previous.tasks[0].failure_reported_at = kNow - kExitStatusWait;
       },
       TaskState::kUnknown, TaskEvent::kFailed, "", "CoordinatorDeclaredFailed"},
      // Waiting reasons that never clear (waiting_failure.h) are failures, classified by them.
      {"invalidImageNameIsFatalByDefault",
       [&](TestPass& t) {
         pod0(t).phase = PodPhase::kPending;
         pod0(t).waiting_reason = "InvalidImageName";
         pod0(t).created = kNow;
       },
       TaskState::kUnknown, TaskEvent::kFatal, "", "InvalidImageName"},
      {"imagePullBackOffWithinTheBoundWaits",
       [&](TestPass& t) {
         pod0(t).phase = PodPhase::kPending;
         pod0(t).waiting_reason = "ImagePullBackOff";
         pod0(t).created = kNow - kStuckWaitingBound + absl::Seconds(1);
       },
       TaskState::kPending, TaskEvent::kNone},
      {"imagePullBackOffPastTheBoundIsRetryable",
       [&](TestPass& t) {
         pod0(t).phase = PodPhase::kPending;
         pod0(t).waiting_reason = "ImagePullBackOff";
         pod0(t).created = kNow - kStuckWaitingBound;
       },
       TaskState::kUnknown, TaskEvent::kFailed, "", "ImagePullBackOff"},
      {"createContainerConfigErrorPastTheBoundMatchesFatalReasons",
       [&](TestPass& t) {
         t.spec.failure_policy.fatal_reasons = {"CreateContainerConfigError"};
         pod0(t).phase = PodPhase::kPending;
         pod0(t).waiting_reason = "CreateContainerConfigError";
         pod0(t).created = kNow - absl::Minutes(6);
       },
       TaskState::kUnknown, TaskEvent::kFatal, "", "CreateContainerConfigError"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    TestPass t(TrainingJobBuilder("j").Tasks(2));
    c.given(t);
    JobPass pass = t.Before("task states");
    TaskRecord& record = pass.tasks[0];
    ClassifyTask(t.Inputs(), record);
    EXPECT_EQ(record.status.state, c.want_state);
    EXPECT_EQ(record.event, c.want_event);
    EXPECT_EQ(record.preemption_reason, c.want_preemption_reason);
    EXPECT_EQ(record.failure.reason, c.want_failure_reason);
    EXPECT_EQ(record.node_deadline, c.want_node_deadline);
    EXPECT_EQ(record.status.preempting_since, c.want_since);
  }
}

// The exit-code race, pass by pass on fake times: the coordinator declares task 0 failed
// (its session broke) before the kubelet's update says the pod failed.
class ExitStatusRace : public ::testing::Test {
 protected:
  ExitStatusRace() : t_(TrainingJobBuilder("j").Tasks(2)) {
    t_.spec.failure_policy.fatal_reasons = {"OOMKilled"};
    t_.world.coordinator_failed[0] = {0, "session broken: connection reset"};
  }
  // One pass at kNow + `at`, from the status the last one wrote.
  ReconcilePlan PassAt(absl::Duration at) {
    t_.now = kNow + at;
    ReconcilePlan plan = PlanReconcile(t_.Inputs());
    t_.previous = plan.status;
    return plan;
  }

  TestPass t_;
};

TEST_F(ExitStatusRace, ReportAheadOfThePod_WaitsForItsStatus_ThenItsOOMKilledIsFatal) {
  ReconcilePlan first = PassAt(absl::ZeroDuration());
  EXPECT_EQ(first.status.tasks[0].state, TaskState::kAwaitingExit);
  EXPECT_EQ(first.status.tasks[0].failure_reported_at, kNow);
  EXPECT_THAT(first.delete_pods, ::testing::IsEmpty());  // the pod is not deleted meanwhile
  EXPECT_THAT(first.replacements, ::testing::IsEmpty());
  EXPECT_EQ(first.requeue_after, kExitStatusWait);
  EXPECT_EQ(first.status.phase, kPhaseRestarting);
  EXPECT_EQ(first.status.restarts, 0);

  // The pod's status arrives a second later: exit 137, OOMKilled, which the policy calls fatal.
  t_.world.task_pods[0] = PodBuilder("j", 0).Failed(137, "OOMKilled").Build();
  ReconcilePlan second = PassAt(absl::Seconds(1));
  EXPECT_EQ(second.status.phase, kPhaseFailed);
  EXPECT_EQ(ConditionOf(second.status, "Failed"), "True/FatalFailure");
  EXPECT_EQ(second.status.tasks[0].last_failure_reason, "OOMKilled");
  EXPECT_EQ(second.status.tasks[0].last_exit_code, 137);
  EXPECT_EQ(second.status.tasks[0].failure_reported_at, std::nullopt);
  ASSERT_FALSE(second.events.empty());
  EXPECT_THAT(second.events.back().message, HasSubstr("code 137 (OOMKilled)"));
}

TEST_F(ExitStatusRace, ThePodNeverEnds_RestartsAsCoordinatorDeclaredFailedAtTheBound) {
  PassAt(absl::ZeroDuration());
  // An operator restart in between reads the wait's start back from status.
  ReconcilePlan waiting = PassAt(kExitStatusWait - absl::Milliseconds(1));
  EXPECT_EQ(waiting.status.tasks[0].state, TaskState::kAwaitingExit);
  EXPECT_EQ(waiting.requeue_after, absl::Milliseconds(1));
  EXPECT_THAT(waiting.delete_pods, ::testing::IsEmpty());

  ReconcilePlan restarted = PassAt(kExitStatusWait);  // a hung process: its pod never ends
  EXPECT_THAT(restarted.delete_pods, ElementsAre("j-task-0-0"));
  EXPECT_EQ(restarted.status.restarts, 1);
  const TaskStatus& task = restarted.status.tasks[0];
  EXPECT_EQ(task.incarnation, 1);
  EXPECT_EQ(task.last_failure_reason, "CoordinatorDeclaredFailed");
  EXPECT_EQ(task.last_exit_code, std::nullopt);
  EXPECT_EQ(task.last_failure_message, "session broken: connection reset");
  EXPECT_EQ(task.failure_reported_at, std::nullopt);
  EXPECT_THAT(Reasons(restarted.events), ElementsAre("TaskRestarted"));
  EXPECT_THAT(restarted.events[0].message, HasSubstr("session broken: connection reset"));
}

TEST_F(ExitStatusRace, AJobThatFailsMeanwhile_LeavesNoWaitBehind) {
  t_.spec.failure_policy.max_restarts = 0;
  t_.world.task_pods[1] = PodBuilder("j", 1).Failed(1, "Error").Build();
  ReconcilePlan plan = PassAt(absl::ZeroDuration());
  EXPECT_EQ(plan.status.phase, kPhaseFailed);
  EXPECT_EQ(plan.status.tasks[0].failure_reported_at, std::nullopt);
}

TEST(FailureMessage, IsTheTerminationMessage_BoundedToItsEnd) {
  TestPass t(TrainingJobBuilder("j").Tasks(2));
  PodView failed = PodBuilder("j", 1).Failed(1, "Error").Build();
  failed.message = std::string(3000, 'x') + "\nTraceback: ValueError: bad shard";
  t.world.task_pods[1] = failed;
  ReconcilePlan plan = PlanReconcile(t.Inputs());
  const std::string& message = plan.status.tasks[1].last_failure_message;
  EXPECT_LE(message.size(), kMaxFailureMessageBytes);
  EXPECT_THAT(message, ::testing::StartsWith("..."));
  EXPECT_THAT(message, ::testing::EndsWith("ValueError: bad shard"));
  ASSERT_THAT(Reasons(plan.events), ElementsAre("TaskRestarted"));
  EXPECT_THAT(plan.events[0].message, HasSubstr("ValueError: bad shard"));
}

TEST(ClassifyTasks, CountsRunningReadyAndSucceededPods) {
  TestPass t(TrainingJobBuilder("j").Tasks(4));
  t.world.task_pods[1].ready = false;
  t.world.task_pods[2].phase = PodPhase::kSucceeded;
  t.world.task_pods[3].disruption_target = true;  // preempted: counts as neither
  JobPass pass = t.Before("task states");
  ClassifyTasks(t.Inputs(), pass);
  EXPECT_EQ(pass.running, 2);
  EXPECT_EQ(pass.ready, 1);
  EXPECT_EQ(pass.succeeded, 1);
  EXPECT_EQ(pass.out.status.ready_tasks, 1);
}

// Issue 31 (5): the kube-scheduler preempting a task pod for a higher-priority pod marks it
// DisruptionTarget and deletes it at once. Its checkpoint clock starts in this stage (the pod is
// already going), and the PreemptionNotice Event names the cause, once.
TEST(ClassifyTasks, APodTheSchedulerPreemptsGetsANoticeNamingTheScheduler) {
  TestPass t(TrainingJobBuilder("j").Tasks(2));
  PodView& pod = t.world.task_pods[1];
  pod.being_deleted = pod.disruption_target = true;
  pod.disruption = "PreemptionByScheduler: Preempted by pod 4d2c on node node-0";
  JobPass pass = t.Before("task states");
  ClassifyTasks(t.Inputs(), pass);
  EXPECT_EQ(pass.tasks[1].status.state, TaskState::kTerminating);
  EXPECT_EQ(pass.tasks[1].status.preempting_since, kNow);
  ASSERT_THAT(Reasons(pass.out.events), ElementsAre("PreemptionNotice"));
  EXPECT_EQ(pass.out.events[0].message,
            "task 1's pod j-task-1-0 is disrupted (DisruptionTarget PreemptionByScheduler: "
            "Preempted by pod 4d2c on node node-0); asking its coordinator for a coordinated "
            "checkpoint before it goes");

  // The next pass: the clock is already running, nothing more to say.
  t.previous.tasks = {pass.tasks[0].status, pass.tasks[1].status};
  JobPass again = t.Before("task states");
  ClassifyTasks(t.Inputs(), again);
  EXPECT_THAT(Reasons(again.out.events), ::testing::IsEmpty());
}

}  // namespace
}  // namespace phalanx::op
