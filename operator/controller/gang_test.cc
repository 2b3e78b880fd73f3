// The gang stage (gang.h): a forming job that got part of the cluster gives it back after
// spec.gang.timeoutSeconds, waits its back-off, then creates every task again.
#include "operator/controller/gang.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/kube/object_meta.h"
#include "operator/controller/plan.h"
#include "operator/controller/plan_testing.h"

namespace phalanx::op {
namespace {

using namespace builders;  // NOLINT
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::UnorderedElementsAre;

// A 4-task job created 10 s before kNow whose tasks 0 and 1 got a node and 2 and 3 did not.
TestPass HalfPlaced(std::optional<absl::Duration> timeout = absl::Seconds(5)) {
  TestPass t(TrainingJobBuilder("j").Tasks(4));
  t.spec.gang_timeout = timeout;
  t.previous.phase = kPhaseStarting;
  t.previous.tasks.resize(4);
  for (int i = 0; i < 4; ++i) {
    PodView& pod = t.world.task_pods[static_cast<size_t>(i)];
    pod.created = kNow - absl::Seconds(10);
    t.previous.tasks[static_cast<size_t>(i)].index = i;
    if (i >= 2) {
      pod.phase = PodPhase::kPending;
      pod.ready = false;
      pod.node.clear();
      pod.unschedulable = true;
      pod.unschedulable_message = "0/2 nodes are available: 2 Insufficient nvidia.com/gpu.";
    }
  }
  return t;
}

TEST(GangBackoff, DoublesUpToTheCapWithAnOffsetBelowOneTimeoutPerJob) {
  const absl::Duration t = absl::Seconds(10);
  const absl::Duration first = GangBackoff(t, 1, "uid-a");
  EXPECT_GE(first, t);
  EXPECT_LT(first, 2 * t);
  EXPECT_EQ(GangBackoff(t, 2, "uid-a") - first, t);
  EXPECT_EQ(GangBackoff(t, 3, "uid-a") - first, 3 * t);
  EXPECT_LT(GangBackoff(t, 40, "uid-a"), kMaxGangBackoff + t);
  EXPECT_GE(GangBackoff(t, 40, "uid-a"), kMaxGangBackoff);
  EXPECT_NE(GangBackoff(t, 1, "uid-a"), GangBackoff(t, 1, "uid-b"))
      << "two jobs released together retry at different times";
}

TEST(FormGang, APartlyPlacedGangPastItsTimeoutGivesItsPodsBackAndHolds) {
  TestPass t = HalfPlaced();
  JobPass pass = t.Before("gang");
  EXPECT_EQ(FormGang(t.Inputs(), pass), Next::kContinue);
  EXPECT_THAT(pass.out.delete_pods,
              UnorderedElementsAre("j-task-0-0", "j-task-1-0", "j-task-2-0", "j-task-3-0"));
  EXPECT_TRUE(pass.gang_hold);
  EXPECT_FALSE(pass.MayCreateTaskPods());
  EXPECT_EQ(pass.out.status.gang_releases, 1);
  EXPECT_EQ(pass.out.status.gang_released_at, kNow);
  EXPECT_EQ(pass.out.requeue_after,
            GangBackoff(absl::Seconds(5), 1, kube::MetaString(t.job, "uid")));
  // After the schedulability stage's Unschedulable Event.
  ASSERT_THAT(Reasons(pass.out.events), ElementsAre("Unschedulable", "GangReleased"));
  EXPECT_THAT(pass.out.events[1].message,
              HasSubstr("2 tasks were placed but not the whole gang within 5s (task 2: 0/2 nodes "
                        "are available: 2 Insufficient nvidia.com/gpu.; task 3: "));
  EXPECT_EQ(ConditionOf(pass.out.status, "GangWaiting"), "True/GangReleased");
  for (const TaskRecord& r : pass.tasks) {
    EXPECT_EQ(r.status.incarnation, 1) << "task " << r.status.index;
    EXPECT_EQ(r.status.state, TaskState::kPending);
  }
  // The whole pass: pods deleted, none created, the release recorded in the status.
  const ReconcilePlan plan = PlanReconcile(t.Inputs());
  EXPECT_THAT(plan.create, IsEmpty());
  EXPECT_EQ(plan.status.gang_releases, 1);
  EXPECT_EQ(plan.status.restarts, 0);
}

TEST(FormGang, BeforeItsTimeoutTheGangWaits) {
  TestPass t = HalfPlaced(absl::Seconds(30));
  JobPass pass = t.Before("gang");
  FormGang(t.Inputs(), pass);
  EXPECT_THAT(pass.out.delete_pods, IsEmpty());
  EXPECT_FALSE(pass.gang_hold);
  EXPECT_EQ(pass.out.requeue_after, absl::Seconds(20));  // looks again when it runs out
  EXPECT_EQ(ConditionOf(pass.out.status, "GangWaiting"), "none");
}

TEST(FormGang, AfterAReleaseNoPodIsCreatedUntilTheBackoffEndsThenAllAre) {
  TestPass t(TrainingJobBuilder("j").Tasks(4));
  t.spec.gang_timeout = absl::Seconds(5);
  t.previous.phase = kPhasePending;
  t.previous.tasks.resize(4);
  for (int i = 0; i < 4; ++i) t.previous.tasks[static_cast<size_t>(i)].index = i;
  t.previous.gang_releases = 1;
  t.previous.gang_released_at = kNow - absl::Seconds(1);
  t.world.task_pods.clear();  // the released pods are gone
  const absl::Duration backoff = GangBackoff(absl::Seconds(5), 1, kube::MetaString(t.job, "uid"));
  ReconcilePlan held = PlanReconcile(t.Inputs());
  EXPECT_THAT(held.create, IsEmpty());
  EXPECT_EQ(held.requeue_after, backoff - absl::Seconds(1));

  t.now = kNow - absl::Seconds(1) + backoff;
  ReconcilePlan again = PlanReconcile(t.Inputs());
  EXPECT_THAT(Names(again.create),
              UnorderedElementsAre("j-task-0-0", "j-task-1-0", "j-task-2-0", "j-task-3-0"));
  EXPECT_EQ(again.status.restarts, 0);
  EXPECT_EQ(again.status.gang_releases, 1);
}

TEST(FormGang, NothingIsReleasedWithoutATimeoutWhenNothingIsPlacedOrOnceTheJobRan) {
  {
    TestPass t = HalfPlaced(std::nullopt);  // spec.gang unset: off
    JobPass pass = t.Before("gang");
    FormGang(t.Inputs(), pass);
    EXPECT_THAT(pass.out.delete_pods, IsEmpty());
  }
  {
    TestPass t = HalfPlaced();
    for (PodView& pod : t.world.task_pods) {
      pod.node.clear();
      pod.unschedulable = true;
    }
    JobPass pass = t.Before("gang");
    FormGang(t.Inputs(), pass);
    EXPECT_THAT(pass.out.delete_pods, IsEmpty()) << "no pod holds anything";
  }
  {
    // A job that ran: a replacement that cannot be placed is not held behind the gang, and the
    // condition says the gang ran.
    TestPass t = HalfPlaced();
    t.previous.start_time = kNow - absl::Minutes(1);
    t.previous.conditions.push_back(
        {"GangWaiting", "True", "GangReleased", "", kNow - absl::Minutes(2), 1});
    JobPass pass = t.Before("gang");
    FormGang(t.Inputs(), pass);
    EXPECT_THAT(pass.out.delete_pods, IsEmpty());
    EXPECT_FALSE(pass.gang_hold);
    EXPECT_EQ(ConditionOf(pass.out.status, "GangWaiting"), "False/GangRunning");
  }
}

}  // namespace
}  // namespace phalanx::op
