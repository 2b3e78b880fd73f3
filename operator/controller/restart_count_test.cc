// The restart count (failure_policy.h, pass.h): status.restarts — the RESTARTS printer column —
// counts one restart per pass that replaces failed tasks, however many failed in it, and the
// MaxRestartsExceeded message names that same count. Whole passes (PlanReconcile) over fake
// times: every task pod of the current incarnation fails as scripted, pass after pass.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>

#include "operator/controller/plan_testing.h"

namespace phalanx::op {
namespace {

using namespace builders;  // NOLINT
using ::testing::HasSubstr;

TEST(RestartCount, Table) {
  struct Case {
    std::string name;
    int tasks;
    RestartScope scope;
    int max_restarts;
    // Which tasks exit 1 in each pass (a pass with none: their replacements run).
    std::vector<std::vector<int>> failing;
    int want_restarts;         // status.restarts when the job failed
    std::string want_message;  // in the MaxRestartsExceeded condition
  };
  const Case cases[] = {
      // The job: task 0 fails first, then both keep exiting 1 (maxRestarts 2). It used to
      // end "maxRestarts (2) is exhausted" with RESTARTS 1.
      {"tasksThatKeepExiting1",
       2,
       RestartScope::kTask,
       2,
       {{0}, {0, 1}, {0, 1}, {0, 1}},
       2,
       ", and task 1 failed too; the job was already restarted 2 times (maxRestarts 2)"},
      {"everyTaskFailingTogetherIsOneRestart",
       4,
       RestartScope::kTask,
       1,
       {{0, 1, 2, 3}, {}, {3}},
       1,
       "task 3 pod j-task-3-1 exited with code 1 (Error); the job was already restarted 1 time "
       "(maxRestarts 1)"},
      {"jobScopeCountsTheSame",
       2,
       RestartScope::kJob,
       2,
       {{0}, {0, 1}, {1}},
       2,
       "the job was already restarted 2 times (maxRestarts 2)"},
      {"maxRestartsZeroFailsAtTheFirstFailure",
       3,
       RestartScope::kTask,
       0,
       {{1, 2}},
       0,
       "task 1 pod j-task-1-0 exited with code 1 (Error), and task 2 failed too; the job was "
       "already restarted 0 times (maxRestarts 0)"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    TestPass t(TrainingJobBuilder("j").Tasks(c.tasks).Scope(c.scope).MaxRestarts(c.max_restarts));
    t.previous = PlanReconcile(t.Inputs()).status;
    for (const std::vector<int>& failing : c.failing) {
      t.now += absl::Hours(1);  // past any back-off
      t.world.task_pods.clear();
      for (const TaskStatus& task : t.previous.tasks) {
        PodBuilder pod("j", task.index, task.incarnation);
        if (std::find(failing.begin(), failing.end(), task.index) != failing.end()) {
          pod.Failed(1, "Error");
        }
        t.world.task_pods.push_back(pod.Build());
      }
      t.previous = PlanReconcile(t.Inputs()).status;
      if (t.previous.phase == kPhaseFailed) break;
    }
    ASSERT_EQ(t.previous.phase, kPhaseFailed);
    EXPECT_EQ(t.previous.restarts, c.want_restarts);
    std::string message;
    for (const Condition& cond : t.previous.conditions) {
      if (cond.type == "Failed") message = cond.message;
    }
    EXPECT_THAT(message, HasSubstr(c.want_message));
    EXPECT_THAT(message, HasSubstr(absl::StrCat("restarted ", t.previous.restarts, " time")));
  }
}

}  // namespace
}  // namespace phalanx::op
