// Table test of the success stage (success_policy.h).
#include "operator/controller/success_policy.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "operator/controller/plan_testing.h"

namespace phalanx::op {
namespace {

using namespace builders;  // NOLINT
using ::testing::ElementsAreArray;

TEST(ApplySuccessPolicy, Table) {
  struct Case {
    std::string name;
    bool task_zero;
    std::vector<int> succeeded;  // tasks whose pods succeeded (of 3)
    Next want_next;
    std::string want_condition;
    std::vector<std::string> want_deleted;
  };
  const Case cases[] = {
      {"allTasksNoneDone", false, {}, Next::kContinue, "none", {}},
      {"allTasksSomeDone", false, {0, 1}, Next::kContinue, "none", {}},
      {"allTasksAllDone", false, {0, 1, 2}, Next::kDone, "True/Completed", {"j-coordinator"}},
      {"taskZeroDoneEndsTheJob",
       true,
       {0},
       Next::kDone,
       "True/Completed",
       {"j-task-1-0", "j-task-2-0", "j-coordinator"}},
      {"taskZeroNotDone", true, {1, 2}, Next::kContinue, "none", {}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    TrainingJobBuilder job("j");
    job.Tasks(3);
    if (c.task_zero) job.TaskZeroSucceeds();
    TestPass t(job);
    for (int i : c.succeeded)
      t.world.task_pods[static_cast<size_t>(i)].phase = PodPhase::kSucceeded;
    JobPass pass = t.Before("success");
    EXPECT_EQ(ApplySuccessPolicy(t.Inputs(), pass), c.want_next);
    EXPECT_EQ(ConditionOf(pass.out.status, "Succeeded"), c.want_condition);
    EXPECT_THAT(pass.out.delete_pods, ElementsAreArray(c.want_deleted));
    if (c.want_next != Next::kDone) continue;
    EXPECT_EQ(pass.out.status.phase, kPhaseSucceeded);
    EXPECT_EQ(pass.out.status.completion_time, kNow);
    EXPECT_EQ(ConditionOf(pass.out.status, "Running"), "False/Completed");
    EXPECT_THAT(Reasons(pass.out.events), ElementsAreArray({"Completed"}));
  }
}

}  // namespace
}  // namespace phalanx::op
