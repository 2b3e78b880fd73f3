// The recovery-time stage (recovery_time.h): a replaced task's recovery runs from when its
// predecessor stopped to when the coordinator registered its replacement's incarnation.
#include "operator/controller/recovery_time.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "operator/controller/plan.h"
#include "operator/controller/plan_testing.h"

namespace phalanx::op {
namespace {

using namespace builders;  // NOLINT
using ::testing::ElementsAre;
using ::testing::IsEmpty;

// Task 1 was replaced 5 s ago as incarnation 1 (its predecessor stopped 7 s ago).
TestPass Recovering() {
  TestPass t(TrainingJobBuilder("j").Tasks(2));
  t.previous.tasks.resize(2);
  for (int i = 0; i < 2; ++i) t.previous.tasks[static_cast<size_t>(i)].index = i;
  t.previous.tasks[1].incarnation = 1;
  t.previous.tasks[1].pod = "j-task-1-1";
  t.previous.tasks[1].recovering_since = kNow - absl::Seconds(7);
  t.world.task_pods[1].incarnation = 1;
  t.world.task_pods[1].name = "j-task-1-1";
  return t;
}

TEST(MeasureRecoveries, EndsWhenTheCoordinatorRegisteredTheReplacement) {
  struct Case {
    const char* name;
    std::optional<Incarnation> registered;  // the coordinator's newest for task 1
    std::optional<double> want_seconds;
  };
  const Case cases[] = {
      {"notRegisteredYet", std::nullopt, std::nullopt},
      {"onlyThePredecessorRegistered", 0, std::nullopt},
      {"theReplacementRegistered", 1, 7.0},
      {"aLaterOneRegisteredToo", 2, 7.0},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    TestPass t = Recovering();
    if (c.registered.has_value()) t.world.coordinator_incarnations[1] = *c.registered;
    JobPass pass = t.Before("recovery time");
    EXPECT_EQ(MeasureRecoveries(t.Inputs(), pass), Next::kContinue);
    EXPECT_EQ(pass.out.status.last_recovery_seconds, c.want_seconds);
    EXPECT_EQ(pass.tasks[1].status.recovering_since.has_value(), !c.want_seconds.has_value());
    if (c.want_seconds.has_value()) {
      EXPECT_THAT(pass.out.recoveries, ElementsAre(*c.want_seconds));
    } else {
      EXPECT_THAT(pass.out.recoveries, IsEmpty());
    }
  }
}

// A replacement starts the clock at the predecessor's stop: its pod's finishedAt.
TEST(MeasureRecoveries, ARestartStartsTheClockWhenThePredecessorStopped) {
  TestPass t(TrainingJobBuilder("j").Tasks(2));
  t.world.task_pods[1] = PodBuilder("j", 1).Failed(1, "Error").Build();
  t.world.task_pods[1].finished_at = kNow - absl::Seconds(3);
  const ReconcilePlan plan = PlanReconcile(t.Inputs());
  ASSERT_EQ(plan.status.tasks.size(), 2u);
  EXPECT_EQ(plan.status.tasks[1].incarnation, 1u);
  EXPECT_EQ(plan.status.tasks[1].recovering_since, kNow - absl::Seconds(3));
  EXPECT_FALSE(plan.status.tasks[0].recovering_since.has_value());
}

}  // namespace
}  // namespace phalanx::op
