// Table test of the task-state stage (task_state.h): each task's state and event from its pod.
#include "operator/controller/task_state.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <functional>

#include "operator/controller/plan_testing.h"

namespace phalanx::op {
namespace {

using namespace builders;  // NOLINT

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
      {"declaredFailedByTheCoordinator",
       [](TestPass& t) {
         t.world.coordinator_failed[0] = {0, "heartbeat timeout"};
       },
       TaskState::kUnknown, TaskEvent::kFailed, "", "CoordinatorDeclaredFailed"},
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

}  // namespace
}  // namespace phalanx::op
