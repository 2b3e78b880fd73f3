// Table test of the keepFailedPods rule (failed_pods.h), and of the children stage and
// RestartTask applying it.
#include "operator/controller/failed_pods.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "operator/controller/children.h"
#include "operator/controller/failure_policy.h"
#include "operator/controller/plan_testing.h"

namespace phalanx::op {
namespace {

using namespace builders;  // NOLINT
using ::testing::ElementsAreArray;
using ::testing::IsEmpty;
using ::testing::UnorderedElementsAreArray;

TEST(StalePodsToDelete, Table) {
  const PodView failed0 = PodBuilder("j", 0, 0).Failed(1, "Error").Build();
  const PodView failed1 = PodBuilder("j", 0, 1).Failed(1, "Error").Build();
  const PodView failed2 = PodBuilder("j", 0, 2).Failed(137, "OOMKilled").Build();
  const PodView running3 = PodBuilder("j", 0, 3).Build();
  const PodView succeeded4 = PodBuilder("j", 0, 4).Phase(PodPhase::kSucceeded).Build();
  const PodView deleting_failed5 = PodBuilder("j", 0, 5).Failed(1).Deleting().Build();
  const PodView deleting_running6 = PodBuilder("j", 0, 6).Deleting().Build();
  struct Case {
    std::string name;
    std::vector<PodView> stale;
    int keep;
    std::vector<std::string> want_deleted;
  };
  const Case cases[] = {
      {"nothingStale", {}, 3, {}},
      {"failedPodsWithinTheBoundAreKept", {failed0, failed1, failed2}, 3, {}},
      {"theOldestFailedPodsGoBeyondTheBound", {failed2, failed0, failed1}, 2, {"j-task-0-0"}},
      {"keepZeroDeletesEveryFailedPod", {failed0, failed1}, 0, {"j-task-0-1", "j-task-0-0"}},
      {"aPodThatDidNotEndIsDeletedAsBefore", {running3, failed2}, 3, {"j-task-0-3"}},
      {"aSucceededPodIsNotKept", {succeeded4}, 3, {"j-task-0-4"}},
      {"podsBeingDeletedAreLeftAloneAndTakeNoSlot",
       {deleting_failed5, deleting_running6, failed1, failed0},
       1,
       {"j-task-0-0"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    EXPECT_THAT(StalePodsToDelete(c.stale, c.keep), ElementsAreArray(c.want_deleted));
  }
}

TEST(KeepWhenReplaced, OnlyAFailedPodAndOnlyWhenSomeAreKept) {
  EXPECT_TRUE(KeepWhenReplaced(PodBuilder("j", 0).Failed(1).Build(), 1));
  EXPECT_FALSE(KeepWhenReplaced(PodBuilder("j", 0).Failed(1).Build(), 0));
  EXPECT_FALSE(KeepWhenReplaced(PodBuilder("j", 0).Build(), 3));  // hung or declared failed
  EXPECT_FALSE(KeepWhenReplaced(PodBuilder("j", 0).Phase(PodPhase::kSucceeded).Build(), 3));
}

// The failures stage replaces a task whose pod exited 1 without deleting that pod (its log is the
// crash's); with keepFailedPods 0 the pod goes as before.
TEST(KeepFailedPods, ReplacingAFailedTaskKeepsItsPod) {
  for (int keep : {3, 0}) {
    SCOPED_TRACE(keep);
    TestPass t(TrainingJobBuilder("j").Tasks(2));
    t.spec.failure_policy.keep_failed_pods = keep;
    t.world.task_pods[1] = PodBuilder("j", 1).Failed(1, "Error").Build();
    JobPass pass = t.Before("failures");
    RestartFailedTasks(t.Inputs(), pass);
    EXPECT_THAT(Names(pass.out.create), ElementsAreArray({"j-task-1-1"}));
    if (keep > 0) {
      EXPECT_THAT(pass.out.delete_pods, IsEmpty());
    } else {
      EXPECT_THAT(pass.out.delete_pods, ElementsAreArray({"j-task-1-0"}));
    }
  }
}

// A task the coordinator declared failed (its pod still Running: a hang) is replaced and its pod
// deleted whatever keepFailedPods says: a pod that did not end must not linger.
TEST(KeepFailedPods, ReplacingAHungTaskStillDeletesItsPod) {
  TestPass t(TrainingJobBuilder("j").Tasks(2));
  JobPass pass = t.Before("failures");
  RestartTask(t.Inputs(), pass, 1, "CoordinatorDeclaredFailed", std::nullopt);
  EXPECT_THAT(pass.out.delete_pods, ElementsAreArray({"j-task-1-0"}));
  EXPECT_THAT(Names(pass.out.create), ElementsAreArray({"j-task-1-1"}));
}

// The children stage, on the pass after: the kept failed pods of older incarnations stay (up to
// the bound, newest first), a stale pod that did not end is deleted, and the kept pods count as
// neither running nor ready.
TEST(KeepFailedPods, ChildrenStageKeepsTheNewestFailedPodsPerTask) {
  TestPass t(TrainingJobBuilder("j").Tasks(2));
  t.spec.failure_policy.keep_failed_pods = 2;
  t.previous.tasks.resize(2);
  t.previous.tasks[0].incarnation = 3;
  t.world.task_pods = {
      PodBuilder("j", 0, 3).Build(),
      PodBuilder("j", 0, 0).Failed(1, "Error").Build(),
      PodBuilder("j", 0, 1).Failed(1, "Error").Build(),
      PodBuilder("j", 0, 2).Failed(1, "Error").Build(),
      PodBuilder("j", 1, 0).Build(),
      PodBuilder("j", 1, 1).Failed(1, "Error").Build(),
      PodBuilder("j", 1, 2).Build(),
  };
  t.previous.tasks[1].incarnation = 2;
  JobPass pass = t.Before("children");
  EnsureJobChildren(t.Inputs(), pass);
  EXPECT_THAT(pass.out.delete_pods, UnorderedElementsAreArray({"j-task-0-0", "j-task-1-0"}));
  pass = t.Before("phase");
  EXPECT_EQ(pass.running, 2);
  EXPECT_EQ(pass.ready, 2);
  EXPECT_EQ(pass.tasks[0].status.pod, "j-task-0-3");
  EXPECT_EQ(pass.tasks[1].status.pod, "j-task-1-2");
  EXPECT_EQ(pass.tasks[0].status.state, TaskState::kRunning);
}

}  // namespace
}  // namespace phalanx::op
