// Table test of the suspend stage (suspend_policy.h).
#include "operator/controller/suspend_policy.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "operator/controller/plan_testing.h"

namespace phalanx::op {
namespace {

using namespace builders;  // NOLINT
using ::testing::ElementsAreArray;
using ::testing::UnorderedElementsAreArray;

TEST(ApplySuspend, Table) {
  struct Case {
    std::string name;
    bool suspend;
    std::string previous_phase;
    Next want_next;
    std::string want_phase;
    std::vector<std::string> want_events;
    std::vector<std::string> want_deleted;
    Incarnation want_incarnation;  // of every task
    TaskState want_state;          // of every task
    std::string want_condition;
    std::string previous_condition = "";  // "status/reason" of Suspended before the pass
  };
  const std::vector<std::string> everything = {"j-task-0-0", "j-task-1-0", "j-coordinator"};
  const Case cases[] = {
      {"suspendingDeletesEveryPodAndBumpsIncarnations",
       true,
       kPhaseRunning,
       Next::kDone,
       kPhaseSuspended,
       {"Suspended"},
       everything,
       1,
       TaskState::kSuspended,
       "True/Suspended"},
      {"stillSuspendedDeletesWhatIsLeftQuietly",
       true,
       kPhaseSuspended,
       Next::kDone,
       kPhaseSuspended,
       {},
       everything,
       0,
       TaskState::kRunning,
       "True/Suspended"},
      {"resumingStartsOverFromPending",
       false,
       kPhaseSuspended,
       Next::kContinue,
       kPhasePending,
       {"Resumed"},
       {},
       0,
       TaskState::kRunning,
       "False/Resumed"},
      {"aRunningJobNeverSuspendedSaysNotSuspended",
       false,
       kPhaseRunning,
       Next::kContinue,
       kPhaseRunning,
       {},
       {},
       0,
       TaskState::kRunning,
       "False/NotSuspended"},
      {"aResumedJobStaysResumed",
       false,
       kPhaseRunning,
       Next::kContinue,
       kPhaseRunning,
       {},
       {},
       0,
       TaskState::kRunning,
       "False/Resumed",
       "False/Resumed"},
      {"aFinishedJobOnlyCleansUpAndItsTasksEndStopped",
       false,
       kPhaseSucceeded,
       Next::kDone,
       kPhaseSucceeded,
       {},
       everything,
       0,
       TaskState::kStopped,
       "False/NotSuspended"},
      {"aFinishedJobIsNotSuspended",
       true,
       kPhaseFailed,
       Next::kDone,
       kPhaseFailed,
       {},
       everything,
       0,
       TaskState::kStopped,
       "True/Suspended"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    TestPass t(TrainingJobBuilder("j").Tasks(2).Suspend(c.suspend));
    t.previous.phase = c.previous_phase;
    t.previous.ready_tasks = 2;
    t.previous.tasks.resize(2);
    for (TaskStatus& task : t.previous.tasks) task.state = TaskState::kRunning;
    if (!c.previous_condition.empty()) {
      const size_t slash = c.previous_condition.find('/');
      t.previous.conditions.push_back({"Suspended", c.previous_condition.substr(0, slash),
                                       c.previous_condition.substr(slash + 1), "", kNow, 3});
    }
    JobPass pass = t.Before("suspend");
    EXPECT_EQ(ApplySuspend(t.Inputs(), pass), c.want_next);
    EXPECT_EQ(pass.out.status.phase, c.want_phase);
    EXPECT_THAT(Reasons(pass.out.events), ElementsAreArray(c.want_events));
    EXPECT_THAT(pass.out.delete_pods, UnorderedElementsAreArray(c.want_deleted));
    EXPECT_EQ(ConditionOf(pass.out.status, "Suspended"), c.want_condition);
    if (c.want_next == Next::kDone) {
      EXPECT_EQ(pass.out.status.ready_tasks, 0);
    }
    for (const TaskRecord& r : pass.tasks) {
      EXPECT_EQ(r.status.incarnation, c.want_incarnation);
      EXPECT_EQ(r.status.state, c.want_state);
    }
  }
}

}  // namespace
}  // namespace phalanx::op
