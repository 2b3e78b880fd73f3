// Table test of the suspend stage (suspend_policy.h).
#include "operator/controller/suspend_policy.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "operator/controller/plan.h"
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
    // No checkpoint time (the schema's minimum is 1 s; a stand-in for "nothing to save"):
    // suspends at once. The checkpoint that comes first is the test below.
    t.spec.preemption.checkpoint_grace = absl::ZeroDuration();
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

// Issue 31 (2): a Running job checkpoints before it is suspended. Pass 1: every live task gets
// its notice (Preempting, preemptingSince now), the pods stay, the condition says Checkpointing;
// pass 2, both tasks left after their checkpoint (exit 4): the suspend goes on, nothing is
// counted; a round that outlives its deadline suspends anyway, with a Warning.
TEST(ApplySuspend, ARunningJobCheckpointsFirstThenSuspends) {
  TestPass t(TrainingJobBuilder("j").Tasks(2).Suspend(true));
  t.spec.preemption.checkpoint_grace = absl::Seconds(30);
  t.previous.phase = kPhaseRunning;
  t.previous.tasks.resize(2);
  for (TaskStatus& task : t.previous.tasks) task.state = TaskState::kRunning;

  JobPass first = t.Before("suspend");
  EXPECT_EQ(ApplySuspend(t.Inputs(), first), Next::kDone);
  EXPECT_EQ(first.out.status.phase, kPhaseRunning);
  EXPECT_THAT(Reasons(first.out.events), ElementsAreArray({"Suspending"}));
  EXPECT_THAT(first.out.delete_pods, ::testing::IsEmpty());
  EXPECT_EQ(ConditionOf(first.out.status, "Suspended"), "True/Checkpointing");
  EXPECT_EQ(first.out.requeue_after, absl::Seconds(30));
  for (const TaskRecord& r : first.tasks) {
    EXPECT_EQ(r.status.state, TaskState::kPreempting);
    EXPECT_EQ(r.status.preempting_since, kNow);
    EXPECT_EQ(r.status.incarnation, 0);
  }
  // The whole pass hands the coordinator a notice for each task (one checkpoint round).
  EXPECT_EQ(PlanReconcile(t.Inputs()).notices.size(), 2u);
  TrainingJobStatus checkpointing = first.out.status;
  for (TaskRecord& r : first.tasks) checkpointing.tasks.push_back(r.status);

  // 10 s later, still checkpointing: no new Event, the same deadline.
  t.previous = checkpointing;
  t.now = kNow + absl::Seconds(10);
  JobPass waiting = t.Before("suspend");
  EXPECT_EQ(ApplySuspend(t.Inputs(), waiting), Next::kDone);
  EXPECT_THAT(Reasons(waiting.out.events), ::testing::IsEmpty());
  EXPECT_EQ(waiting.out.requeue_after, absl::Seconds(20));

  // Both tasks left after checkpointing at the agreed step.
  TestPass left = t;
  for (PodView& pod : left.world.task_pods) {
    pod.phase = PodPhase::kFailed;
    pod.exit_code = 4;
  }
  JobPass done = left.Before("suspend");
  EXPECT_EQ(ApplySuspend(left.Inputs(), done), Next::kDone);
  EXPECT_EQ(done.out.status.phase, kPhaseSuspended);
  EXPECT_THAT(Reasons(done.out.events), ElementsAreArray({"Suspended"}));
  EXPECT_THAT(done.out.delete_pods,
              UnorderedElementsAreArray({"j-task-0-0", "j-task-1-0", "j-coordinator"}));
  EXPECT_EQ(ConditionOf(done.out.status, "Suspended"), "True/Suspended");
  EXPECT_EQ(done.out.status.restarts, 0);
  for (const TaskRecord& r : done.tasks) {
    EXPECT_EQ(r.status.state, TaskState::kSuspended);
    EXPECT_EQ(r.status.incarnation, 1);
    EXPECT_FALSE(r.status.preempting_since.has_value());
  }

  // Past the deadline with the tasks still running: suspended anyway, and said.
  t.now = kNow + absl::Seconds(30);
  JobPass late = t.Before("suspend");
  EXPECT_EQ(ApplySuspend(t.Inputs(), late), Next::kDone);
  EXPECT_EQ(late.out.status.phase, kPhaseSuspended);
  EXPECT_THAT(Reasons(late.out.events),
              ElementsAreArray({"SuspendCheckpointTimedOut", "Suspended"}));
  EXPECT_THAT(late.out.delete_pods,
              UnorderedElementsAreArray({"j-task-0-0", "j-task-1-0", "j-coordinator"}));
}

// A job that never ran (Pending) has nothing to checkpoint: it is suspended at once.
TEST(ApplySuspend, APendingJobIsSuspendedAtOnce) {
  TestPass t(TrainingJobBuilder("j").Tasks(2).Suspend(true));
  t.previous.phase = kPhasePending;
  t.previous.tasks.resize(2);
  JobPass pass = t.Before("suspend");
  EXPECT_EQ(ApplySuspend(t.Inputs(), pass), Next::kDone);
  EXPECT_EQ(pass.out.status.phase, kPhaseSuspended);
  EXPECT_THAT(Reasons(pass.out.events), ElementsAreArray({"Suspended"}));
}

}  // namespace
}  // namespace phalanx::op
