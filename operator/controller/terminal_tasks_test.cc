// Table test of the terminal task states (terminal_tasks.h): a job that ended shows how each task
// ended, through each way a job ends.
#include "operator/controller/terminal_tasks.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "operator/controller/plan_testing.h"

namespace phalanx::op {
namespace {

using namespace builders;  // NOLINT
using ::testing::ElementsAreArray;

std::vector<TaskState> States(const std::vector<TaskStatus>& tasks) {
  std::vector<TaskState> out;
  for (const TaskStatus& t : tasks) out.push_back(t.state);
  return out;
}

TEST(SettleTaskStates, Table) {
  using S = TaskState;
  struct Case {
    std::string name;
    std::function<void(TestPass&)> given;  // 3 tasks, all running
    std::string want_phase;
    std::vector<TaskState> want;
  };
  const Case cases[] = {
      {"fatalFailure_theFailedTaskFailedTheOthersStopped",
       [](TestPass& t) {
         t.spec.failure_policy.fatal_exit_codes = {2};
         t.world.task_pods[1] = PodBuilder("j", 1).Failed(2, "Error").Build();
       },
       kPhaseFailed,
       {S::kStopped, S::kFailed, S::kStopped}},
      {"maxRestartsExceeded_everyFailedTaskFailed",
       [](TestPass& t) {
         t.spec.failure_policy.max_restarts = 0;
         t.world.task_pods[0] = PodBuilder("j", 0).Failed(1, "Error").Build();
         t.world.task_pods[2] = PodBuilder("j", 2).Failed(1, "Error").Build();
       },
       kPhaseFailed,
       {S::kFailed, S::kStopped, S::kFailed}},
      {"allSucceeded",
       [](TestPass& t) {
         for (PodView& pod : t.world.task_pods) pod.phase = PodPhase::kSucceeded;
       },
       kPhaseSucceeded,
       {S::kSucceeded, S::kSucceeded, S::kSucceeded}},
      {"taskZeroSucceeded_theOthersStopped",
       [](TestPass& t) {
         t.spec.success_policy = SuccessPolicy::kTaskZero;
         t.world.task_pods[0].phase = PodPhase::kSucceeded;
         t.world.task_pods[2] = PodBuilder("j", 2).NotReady().Phase(PodPhase::kPending).Build();
       },
       kPhaseSucceeded,
       {S::kSucceeded, S::kStopped, S::kStopped}},
      // A status written before this rule (or by a pass that ended the job) settles on the next
      // pass: a task backing off had failed, one running was stopped.
      {"aFinishedJobsOldStatesSettle",
       [](TestPass& t) {
         t.previous.phase = kPhaseFailed;
         t.previous.tasks.resize(3);
         t.previous.tasks[0].state = S::kRunning;
         t.previous.tasks[1].state = S::kBackingOff;
         t.previous.tasks[2].state = S::kSucceeded;
       },
       kPhaseFailed,
       {S::kStopped, S::kFailed, S::kSucceeded}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    TestPass t(TrainingJobBuilder("j").Tasks(3));
    c.given(t);
    const ReconcilePlan plan = PlanReconcile(t.Inputs());
    EXPECT_EQ(plan.status.phase, c.want_phase);
    EXPECT_THAT(States(plan.status.tasks), ElementsAreArray(c.want));
    // And it stays so on the passes after (the suspend stage settles a finished job again).
    t.previous = plan.status;
    t.now += absl::Minutes(1);
    EXPECT_THAT(States(PlanReconcile(t.Inputs()).status.tasks), ElementsAreArray(c.want));
  }
}

}  // namespace
}  // namespace phalanx::op
