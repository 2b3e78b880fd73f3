// Table tests of the "coordinator move" stage (coordinator_move.h), and the whole planner over
// a move's passes: moved at once, recreated without back-off, counted as a move and never as a
// restart of the coordinator or of a task.
#include "operator/controller/coordinator_move.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <functional>

#include "operator/controller/plan_testing.h"

namespace phalanx::op {
namespace {

using namespace builders;  // NOLINT
using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

// A 2-task job whose tasks run on node-0 and whose coordinator (uid c1) runs on node-1.
TestPass CoordinatorOnNode1() {
  TestPass t(TrainingJobBuilder("j"));
  t.world.coordinator->uid = "c1";
  t.world.coordinator->node = "node-1";
  return t;
}

TEST(MoveCoordinator, Table) {
  struct Case {
    std::string name;
    std::function<void(TestPass&)> given;
    std::vector<std::string> want_deleted;
    std::vector<std::string> want_events;
    int want_moves;
    std::string want_moving_from;
  };
  const Case cases[] = {
      {"aHealthyNodeKeepsIt", [](TestPass&) {}, {}, {}, 0, ""},
      {"aNoticeOnAnotherNodeKeepsIt",
       [](TestPass& t) { t.world.preempting_nodes["node-0"] = absl::InfiniteFuture(); },
       {},
       {},
       0,
       ""},
      {"aNoticeOnItsNodeMovesItAtOnce",
       [](TestPass& t) { t.world.preempting_nodes["node-1"] = kNow + absl::Seconds(30); },
       {"j-coordinator"},
       {"CoordinatorMoving"},
       1,
       "node-1"},
      {"aDisruptedPodIsMoved",
       [](TestPass& t) { t.world.coordinator->disruption_target = true; },
       {"j-coordinator"},
       {"CoordinatorMoving"},
       1,
       "node-1"},
      {"aPodAlreadyMovedIsNotMovedTwice",
       [](TestPass& t) {
         t.world.preempting_nodes["node-1"] = absl::InfiniteFuture();
         t.previous.coordinator.moves = 1;
         t.previous.coordinator.last_moved_pod = "c1";
         t.previous.coordinator.moving_from = "node-1";
       },
       {},
       {},
       1,
       "node-1"},
      {"aPodSomeoneDeletesIsLeftToGo",
       [](TestPass& t) {
         t.world.preempting_nodes["node-1"] = absl::InfiniteFuture();
         t.world.coordinator->being_deleted = true;
       },
       {},
       {},
       0,
       ""},
      // Evicted with its node before the operator moved it: a move, deleted by "children".
      {"aPodThatEndedOnANoticedNodeCountsAsAMove",
       [](TestPass& t) {
         t.world.preempting_nodes["node-1"] = absl::InfiniteFuture();
         t.world.coordinator->phase = PodPhase::kFailed;
         t.world.coordinator->reason = "Evicted";
       },
       {},
       {"CoordinatorMoving"},
       1,
       "node-1"},
      {"aPodThatFailedOnAHealthyNodeIsNotAMove",
       [](TestPass& t) { t.world.coordinator->phase = PodPhase::kFailed; },
       {},
       {},
       0,
       ""},
      {"onNodeTaintsFalseIgnoresTheNotice",
       [](TestPass& t) {
         t.spec.preemption.on_node_taints = false;
         t.world.preempting_nodes["node-1"] = absl::InfiniteFuture();
       },
       {},
       {},
       0,
       ""},
      {"onDisruptionTargetFalseIgnoresTheCondition",
       [](TestPass& t) {
         t.spec.preemption.on_disruption_target = false;
         t.world.coordinator->disruption_target = true;
       },
       {},
       {},
       0,
       ""},
      {"theSuccessorPlacedEndsTheMove",
       [](TestPass& t) {
         t.previous.coordinator.moves = 1;
         t.previous.coordinator.last_moved_pod = "c0";
         t.previous.coordinator.moving_from = "node-2";
       },
       {},
       {"CoordinatorMoved"},
       1,
       ""},
      {"anUnscheduledSuccessorKeepsTheMoveOpen",
       [](TestPass& t) {
         t.previous.coordinator.moves = 1;
         t.previous.coordinator.last_moved_pod = "c0";
         t.previous.coordinator.moving_from = "node-2";
         t.world.coordinator->node = "";
         t.world.coordinator->phase = PodPhase::kPending;
       },
       {},
       {},
       1,
       "node-2"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    TestPass t = CoordinatorOnNode1();
    c.given(t);
    JobPass pass = t.Before("coordinator move");
    EXPECT_EQ(MoveCoordinator(t.Inputs(), pass), Next::kContinue);
    EXPECT_THAT(pass.out.delete_pods, ElementsAreArray(c.want_deleted));
    EXPECT_THAT(Reasons(pass.out.events), ElementsAreArray(c.want_events));
    EXPECT_EQ(pass.out.status.coordinator.moves, c.want_moves);
    EXPECT_EQ(pass.out.status.coordinator.moving_from, c.want_moving_from);
    EXPECT_EQ(pass.out.status.coordinator.restarts, 0);
  }
}

TEST(MoveCoordinator, TheEventsNameBothNodes) {
  TestPass t = CoordinatorOnNode1();
  t.world.preempting_nodes["node-1"] = kNow + absl::Seconds(30);
  ReconcilePlan moving = PlanReconcile(t.Inputs());
  ASSERT_THAT(Reasons(moving.events), ElementsAre("CoordinatorMoving"));
  EXPECT_THAT(moving.events[0].message, HasSubstr("node node-1 has a preemption notice"));
  EXPECT_FALSE(moving.events[0].warning);

  t.previous = moving.status;
  t.world.coordinator->uid = "c2";
  t.world.coordinator->node = "node-2";
  ReconcilePlan moved = PlanReconcile(t.Inputs());
  ASSERT_THAT(Reasons(moved.events), ElementsAre("CoordinatorMoved"));
  EXPECT_THAT(moved.events[0].message, HasSubstr("from node node-1 to node node-2"));
}

// The whole planner over a move: the pod is deleted at once; while it goes nothing is created;
// once gone its successor is created at once (no back-off) with an affinity off the noticed
// node; no restart is counted anywhere and every task keeps running at incarnation 0.
TEST(MoveCoordinator, AMoveOverSeveralPassesCountsNoRestart) {
  TestPass t = CoordinatorOnNode1();
  t.world.preempting_nodes["node-1"] = kNow + absl::Seconds(30);

  ReconcilePlan first = PlanReconcile(t.Inputs());
  EXPECT_THAT(first.delete_pods, ElementsAre("j-coordinator"));
  EXPECT_THAT(Names(first.create), IsEmpty());

  t.previous = first.status;
  t.world.coordinator->being_deleted = true;
  t.now += absl::Seconds(1);
  ReconcilePlan going = PlanReconcile(t.Inputs());
  EXPECT_THAT(going.delete_pods, IsEmpty());
  EXPECT_THAT(Names(going.create), IsEmpty());
  // Ended while being deleted (SIGTERM): still not a restart.
  t.previous = going.status;
  t.world.coordinator->phase = PodPhase::kFailed;
  t.world.coordinator->exit_code = 143;
  ReconcilePlan ended = PlanReconcile(t.Inputs());
  EXPECT_THAT(Reasons(ended.events), IsEmpty());

  t.previous = ended.status;
  t.world.coordinator.reset();
  ReconcilePlan gone = PlanReconcile(t.Inputs());
  ASSERT_THAT(Names(gone.create), ElementsAre("j-coordinator"));
  EXPECT_THAT(
      gone.create[0].at("spec").at("affinity").serialize(),
      HasSubstr(R"({"key":"kubernetes.io/hostname","operator":"NotIn","values":["node-1"]})"));

  for (const ReconcilePlan* plan : {&first, &going, &ended, &gone}) {
    EXPECT_EQ(plan->status.coordinator.restarts, 0);
    EXPECT_EQ(plan->status.coordinator.moves, 1);
    EXPECT_FALSE(plan->status.coordinator.restart_after.has_value());
    EXPECT_EQ(plan->status.restarts, 0);
    for (const TaskStatus& task : plan->status.tasks) {
      EXPECT_EQ(task.incarnation, 0);
      EXPECT_EQ(task.restarts, 0);
    }
    EXPECT_THAT(plan->replacements, IsEmpty());
  }
}

// Issue 13: the CoordinatorRestarted Event the user guide lists is recorded when the coordinator
// fails (not when it moves), with its exit code and reason.
TEST(MoveCoordinator, AFailedCoordinatorIsARestartWithItsEvent) {
  TestPass t = CoordinatorOnNode1();
  t.world.coordinator->phase = PodPhase::kFailed;
  t.world.coordinator->exit_code = 1;
  t.world.coordinator->reason = "Error";
  ReconcilePlan plan = PlanReconcile(t.Inputs());
  ASSERT_THAT(Reasons(plan.events), ElementsAre("CoordinatorRestarted"));
  EXPECT_TRUE(plan.events[0].warning);
  EXPECT_THAT(plan.events[0].message, HasSubstr("exited with code 1 (Error)"));
  EXPECT_EQ(plan.status.coordinator.restarts, 1);
  EXPECT_EQ(plan.status.coordinator.moves, 0);
}

TEST(NodesToAvoid, EveryNodeUnderANotice) {
  JobObservation world;
  world.preempting_nodes["b"] = absl::InfiniteFuture();
  world.preempting_nodes["a"] = kNow;
  EXPECT_THAT(NodesToAvoid(world), ElementsAre("a", "b"));
}

}  // namespace
}  // namespace phalanx::op
