// Table tests of the preemption stage and its notices (preemption_policy.h): the checkpoint
// clock, its deadline (grace or the node's own, the earlier), moving tasks, counting.
#include "operator/controller/preemption_policy.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <functional>

#include "operator/controller/plan_testing.h"

namespace phalanx::op {
namespace {

using namespace builders;  // NOLINT
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;

TEST(ApplyPreemptions, Table) {
  struct Case {
    std::string name;
    std::function<void(TestPass&)> given;  // grace 30 s; task 0 on node-0, task 1 on node-1
    Next want_next;
    std::vector<std::string> want_events;
    std::string want_event_text;  // in the first event
    TaskState want_state;         // task 0's
    std::vector<std::string> want_created;
    absl::Duration want_requeue;
    int want_preemptions = 0;
    int want_restarts = 0;
  };
  auto node0_preempted = [](absl::Time deadline) {
    return [deadline](TestPass& t) { t.world.preempting_nodes["node-0"] = deadline; };
  };
  auto noticed_at = [](absl::Time since, std::function<void(TestPass&)> more) {
    return [since, more](TestPass& t) {
      t.previous.tasks.resize(2);
      t.previous.tasks[0].preempting_since = since;
      t.previous.tasks[0].state = TaskState::kPreempting;
      more(t);
    };
  };
  const Case cases[] = {
      {"aNoticeStartsTheCheckpointWithTheGraceAsDeadline",
       node0_preempted(absl::InfiniteFuture()),
       Next::kContinue,
       {"PreemptionNotice"},
       "task 0 on node node-0 is being preempted; asking its coordinator for a coordinated "
       "checkpoint, deadline 2027-01-15T08:00:30Z (in 30s)",
       TaskState::kPreempting,
       {},
       absl::Seconds(30)},
      {"theNodesEarlierDeadlineWins",
       node0_preempted(kNow + absl::Seconds(12)),
       Next::kContinue,
       {"PreemptionNotice"},
       "(in 12s)",
       TaskState::kPreempting,
       {},
       absl::Seconds(12)},
      {"aLaterNodeDeadlineLeavesTheGrace",
       node0_preempted(kNow + absl::Minutes(5)),
       Next::kContinue,
       {"PreemptionNotice"},
       "(in 30s)",
       TaskState::kPreempting,
       {},
       absl::Seconds(30)},
      {"laterPassesWaitQuietly",
       noticed_at(kNow - absl::Seconds(10), node0_preempted(absl::InfiniteFuture())),
       Next::kContinue,
       {},
       "",
       TaskState::kPreempting,
       {},
       absl::Seconds(20)},
      {"pastTheDeadlineTheTaskMoves",
       noticed_at(kNow - absl::Seconds(30), node0_preempted(absl::InfiniteFuture())),
       Next::kContinue,
       {"TaskPreempted"},
       "task 0 moved off its preempted node as incarnation 1",
       TaskState::kRestarting,
       {"j-task-0-1"},
       absl::ZeroDuration(),
       1},
      {"pastTheNodesDeadlineTheTaskMoves",
       noticed_at(kNow - absl::Seconds(5), node0_preempted(kNow)),
       Next::kContinue,
       {"TaskPreempted"},
       "",
       TaskState::kRestarting,
       {"j-task-0-1"},
       absl::ZeroDuration(),
       1},
      {"aTaskThatLeftAfterItsCheckpointMovesAtOnce",
       noticed_at(kNow - absl::Seconds(2),
                  [](TestPass& t) { t.world.task_pods[0].phase = PodPhase::kFailed; }),
       Next::kContinue,
       {"TaskPreempted"},
       "",
       TaskState::kRestarting,
       {"j-task-0-1"},
       absl::ZeroDuration(),
       1},
      {"anEvictedPodThatIsGoneMovesAtOnce",
       noticed_at(kNow - absl::Seconds(2),
                  [](TestPass& t) {
                    t.previous.tasks[0].pod = "j-task-0-0";
                    t.world.task_pods.erase(t.world.task_pods.begin());
                  }),
       Next::kContinue,
       {"TaskPreempted"},
       "",
       TaskState::kRestarting,
       {"j-task-0-1"},
       absl::ZeroDuration(),
       1},
      {"countingTowardMaxRestartsCanFailTheJob",
       noticed_at(kNow - absl::Seconds(30),
                  [](TestPass& t) {
                    t.world.preempting_nodes["node-0"] = absl::InfiniteFuture();
                    t.spec.failure_policy.max_restarts = 0;
                    t.spec.failure_policy.preemptions_count_toward_max_restarts = true;
                  }),
       Next::kDone,
       {"MaxRestartsExceeded"},
       "already restarted 0 times (maxRestarts 0) and preemptions count",
       TaskState::kStopped,
       {},
       absl::ZeroDuration(),
       1},
      {"countingTowardMaxRestartsSpendsThem",
       noticed_at(kNow - absl::Seconds(30),
                  [](TestPass& t) {
                    t.world.preempting_nodes["node-0"] = absl::InfiniteFuture();
                    t.spec.failure_policy.preemptions_count_toward_max_restarts = true;
                  }),
       Next::kContinue,
       {"TaskPreempted"},
       "",
       TaskState::kRestarting,
       {"j-task-0-1"},
       absl::ZeroDuration(),
       1,
       1},
      {"jobScopeRestartsEveryTask",
       noticed_at(kNow - absl::Seconds(30),
                  [](TestPass& t) {
                    t.world.preempting_nodes["node-0"] = absl::InfiniteFuture();
                    t.spec.failure_policy.restart_scope = RestartScope::kJob;
                  }),
       Next::kContinue,
       {"TaskPreempted"},
       "",
       TaskState::kRestarting,
       {"j-task-0-1", "j-task-1-1"},
       absl::ZeroDuration(),
       1},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    TestPass t(TrainingJobBuilder("j").Tasks(2).Grace(absl::Seconds(30)));
    t.world.task_pods[1].node = "node-1";
    c.given(t);
    JobPass pass = t.Before("preemption");
    EXPECT_EQ(ApplyPreemptions(t.Inputs(), pass), c.want_next);
    EXPECT_THAT(Reasons(pass.out.events), ElementsAreArray(c.want_events));
    if (!c.want_event_text.empty() && !pass.out.events.empty()) {
      EXPECT_THAT(pass.out.events[0].message, HasSubstr(c.want_event_text));
    }
    EXPECT_EQ(pass.tasks[0].status.state, c.want_state);
    EXPECT_THAT(Names(pass.out.create), ElementsAreArray(c.want_created));
    EXPECT_EQ(pass.out.requeue_after, c.want_requeue);
    EXPECT_EQ(pass.out.status.preemptions, c.want_preemptions);
    EXPECT_EQ(pass.out.status.restarts, c.want_restarts);
    EXPECT_EQ(pass.tasks[1].status.state == TaskState::kRestarting,
              c.want_created.size() == 2);  // task 1 only moves with restartScope Job
  }
}

TEST(ApplyPreemptions, AMovedTaskIsAPreemptionForMetricsAndJobRestartsAreNot) {
  TestPass t(TrainingJobBuilder("j").Tasks(2).Scope(RestartScope::kJob));
  t.world.task_pods[0].disruption_target = true;
  t.world.task_pods[0].phase = PodPhase::kFailed;
  JobPass pass = t.Before("preemption");
  ApplyPreemptions(t.Inputs(), pass);
  EXPECT_THAT(pass.out.replacements, ElementsAreArray({Replacement{0, true, "DisruptionTarget"},
                                                       Replacement{1, false, "JobRestart"}}));
  EXPECT_EQ(pass.tasks[0].status.last_failure_reason, "Preempted");
  EXPECT_EQ(pass.tasks[1].status.last_failure_reason, "JobRestart");
  EXPECT_EQ(pass.moved, std::vector<int>{0});
  // The Event says what took the task: here its pod, not its node.
  std::vector<std::string> preempted;
  for (const EventNote& e : pass.out.events) {
    if (e.reason == "TaskPreempted") preempted.push_back(e.message);
  }
  EXPECT_THAT(
      preempted,
      ElementsAreArray({"task 0 moved off its preemption (DisruptionTarget) as incarnation 1"}));
}

TEST(PreemptionNotices, Table) {
  const absl::Time since = kNow - absl::Seconds(5);
  const PreemptionPolicy policy{.checkpoint_grace = absl::Seconds(60)};
  struct Case {
    std::string name;
    TaskState state;
    std::optional<absl::Time> since;
    absl::Time node_deadline;
    std::vector<PreemptionNotice> want;
  };
  const Case cases[] = {
      {"checkpointingWithTheGrace",
       TaskState::kPreempting,
       since,
       absl::InfiniteFuture(),
       {{1, since, since + absl::Seconds(60)}}},
      {"checkpointingWithTheNodesEarlierDeadline",
       TaskState::kPreempting,
       since,
       kNow + absl::Seconds(25),
       {{1, since, kNow + absl::Seconds(25)}}},
      {"terminatingAfterADisruption",
       TaskState::kTerminating,
       since,
       absl::InfiniteFuture(),
       {{1, since, since + absl::Seconds(60)}}},
      {"movedTasksNeedNoNotice", TaskState::kRestarting, std::nullopt, absl::InfiniteFuture(), {}},
      {"aRunningTaskNeedsNone", TaskState::kRunning, std::nullopt, kNow, {}},
      {"terminatingWithoutADisruptionNeedsNone",
       TaskState::kTerminating,
       std::nullopt,
       absl::InfiniteFuture(),
       {}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    std::vector<TaskRecord> tasks(2);
    tasks[0].status.state = TaskState::kRunning;
    tasks[1].status.index = 1;
    tasks[1].status.state = c.state;
    tasks[1].status.preempting_since = c.since;
    tasks[1].node_deadline = c.node_deadline;
    EXPECT_THAT(PreemptionNotices(tasks, policy), ElementsAreArray(c.want));
  }
}

}  // namespace
}  // namespace phalanx::op
