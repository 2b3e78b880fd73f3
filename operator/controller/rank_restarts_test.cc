// The rank-restarts stage (rank_restarts.h): ranks the pod's launcher restarted in place, as the
// coordinator saw their incarnations register, are counted once each, per task and for the job,
// with an Event; a replaced pod starts afresh and a report on an older pod is old news.
#include "operator/controller/rank_restarts.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "operator/controller/plan.h"
#include "operator/controller/plan_testing.h"

namespace phalanx::op {
namespace {

using namespace builders;  // NOLINT
using ::testing::HasSubstr;
using ::testing::IsEmpty;

// 2 pods of 2 ranks (tasks 0-3), pod 1 at incarnation 3.
TestPass TwoPodsOfTwoRanks() {
  TestPass t(TrainingJobBuilder("j").Tasks(2));
  t.spec.nproc_per_node = 2;
  t.previous.tasks.resize(2);
  for (int i = 0; i < 2; ++i) t.previous.tasks[static_cast<size_t>(i)].index = i;
  t.previous.tasks[1].incarnation = 3;
  t.previous.tasks[1].pod = "j-task-1-3";
  t.world.task_pods[1].incarnation = 3;
  t.world.task_pods[1].name = "j-task-1-3";
  return t;
}

TEST(CountRankRestarts, EachNewInPlaceRestartIsCountedOnceWithAnEvent) {
  struct Case {
    const char* name;
    JobObservation::RankRestarts seen;  // for pod 1
    int in_pod_before = 0;
    int want_in_pod = 0;
    int want_added = 0;
  };
  const Case cases[] = {
      {"noneYet", {3, 0}, 0, 0, 0},
      {"oneRankRestarted", {3, 1}, 0, 1, 1},
      {"twoMoreSinceLastPass", {3, 3}, 1, 3, 2},
      {"alreadyCounted", {3, 2}, 2, 2, 0},
      {"aReportOnTheOldPodIsOldNews", {2, 5}, 0, 0, 0},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    TestPass t = TwoPodsOfTwoRanks();
    t.world.rank_restarts[1] = c.seen;
    t.previous.tasks[1].rank_restarts_in_pod = c.in_pod_before;
    t.previous.tasks[1].rank_restarts = 10 + c.in_pod_before;
    t.previous.rank_restarts = 10 + c.in_pod_before;
    JobPass pass = t.Before("rank restarts");
    EXPECT_EQ(CountRankRestarts(t.Inputs(), pass), Next::kContinue);
    const TaskStatus& task = pass.tasks[1].status;
    EXPECT_EQ(task.rank_restarts_in_pod, c.want_in_pod);
    EXPECT_EQ(task.rank_restarts, 10 + c.in_pod_before + c.want_added);
    EXPECT_EQ(pass.out.status.rank_restarts, 10 + c.in_pod_before + c.want_added);
    EXPECT_EQ(pass.tasks[0].status.rank_restarts, 0);
    if (c.want_added == 0) {
      EXPECT_THAT(pass.out.events, IsEmpty());
    } else {
      ASSERT_EQ(pass.out.events.size(), 1u);
      EXPECT_EQ(pass.out.events[0].reason, "RankRestarted");
      EXPECT_TRUE(pass.out.events[0].warning);
      EXPECT_THAT(pass.out.events[0].message, HasSubstr("task 1's pod j-task-1-3"));
      EXPECT_THAT(pass.out.events[0].message, HasSubstr("restarted in place by its launcher"));
    }
  }
}

// The whole plan: counted, not a pod restart (status.restarts and maxRestarts untouched), and a
// replaced pod starts counting again from 0.
TEST(CountRankRestarts, IsNoPodRestartAndAReplacedPodStartsAfresh) {
  TestPass t = TwoPodsOfTwoRanks();
  t.world.rank_restarts[1] = {3, 1};
  ReconcilePlan plan = PlanReconcile(t.Inputs());
  EXPECT_EQ(plan.status.rank_restarts, 1);
  EXPECT_EQ(plan.status.restarts, 0);
  EXPECT_TRUE(plan.create.empty());

  // Pod 1 fails: its next pod's rankRestartsInPod is 0, the total stays.
  TestPass failed = TwoPodsOfTwoRanks();
  failed.previous = plan.status;
  failed.world.task_pods[1].phase = PodPhase::kFailed;
  failed.world.task_pods[1].exit_code = 1;
  failed.world.rank_restarts[1] = {3, 1};
  const ReconcilePlan restarted = PlanReconcile(failed.Inputs());
  ASSERT_EQ(restarted.status.tasks.size(), 2u);
  EXPECT_EQ(restarted.status.tasks[1].incarnation, 4u);
  EXPECT_EQ(restarted.status.tasks[1].rank_restarts_in_pod, 0);
  EXPECT_EQ(restarted.status.tasks[1].rank_restarts, 1);
  EXPECT_EQ(restarted.status.rank_restarts, 1);
}

}  // namespace
}  // namespace phalanx::op
