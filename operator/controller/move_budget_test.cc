// Table tests of the move budget (move_budget.h) on its own and inside the whole pass: a node
// that flaps between preempted and not every 100 ms moves a task at most kMaxMovesPerWindow
// times a minute, and the bound survives the status round trip an operator restart makes.
#include "operator/controller/move_budget.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>

#include "operator/api/codec.h"
#include "operator/controller/plan_testing.h"

namespace phalanx::op {
namespace {

using namespace builders;  // NOLINT
using ::testing::HasSubstr;

TEST(MoveBudget, Table) {
  const absl::Duration s = absl::Seconds(1);
  struct Case {
    std::string name;
    std::vector<absl::Time> moves;
    std::optional<absl::Time> want_held_until;
    size_t want_kept;  // moves left after ForgetOldMoves
  };
  const Case cases[] = {
      {"noMovesYet", {}, std::nullopt, 0},
      {"twoInTheWindow", {kNow - 10 * s, kNow - 5 * s}, std::nullopt, 2},
      {"threeInTheWindowHoldUntilTheOldestLeaves",
       {kNow - 10 * s, kNow - 5 * s, kNow - 1 * s},
       kNow + 50 * s,
       3},
      {"unorderedInputCounts", {kNow - 1 * s, kNow - 10 * s, kNow - 5 * s}, kNow + 50 * s, 3},
      {"oneLeftTheWindow", {kNow - 61 * s, kNow - 5 * s, kNow - 1 * s}, std::nullopt, 2},
      {"exactlyAMinuteAgoHasLeft", {kNow - 60 * s, kNow - 5 * s, kNow - 1 * s}, std::nullopt, 2},
      {"fourInTheWindowWaitForTwoToLeave",
       {kNow - 20 * s, kNow - 10 * s, kNow - 5 * s, kNow - 1 * s},
       kNow + 50 * s,
       4},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    TaskStatus task;
    task.recent_moves = c.moves;
    EXPECT_EQ(MoveHeldUntil(task, kNow), c.want_held_until);
    ForgetOldMoves(task, kNow);
    EXPECT_EQ(task.recent_moves.size(), c.want_kept);
    EXPECT_TRUE(std::is_sorted(task.recent_moves.begin(), task.recent_moves.end()));
    task.move_held_until = kNow;
    RecordMove(task, kNow);
    EXPECT_EQ(task.recent_moves.back(), kNow);
    EXPECT_FALSE(task.move_held_until.has_value());
  }
}

// Task 0's node flaps every `period`: preempted (its pod disrupted and already Failed, so the
// preemption stage moves it at once) on even steps, healthy on odd ones. Each pass reads the
// status the previous one wrote, through the codec, as a restarted operator would.
struct Flapping {
  std::vector<absl::Time> moves;  // when task 0 moved (a TaskPreempted Event)
  int limit_events = 0;           // MoveLimitReached Events
  TrainingJobStatus last;
};

Flapping Flap(absl::Duration period, absl::Duration for_how_long) {
  TestPass t(TrainingJobBuilder("j").Tasks(2).Grace(absl::Seconds(30)));
  t.world.task_pods[1].node = "node-1";
  Flapping out;
  for (int step = 0; step * period <= for_how_long; ++step) {
    t.now = kNow + step * period;
    const Incarnation incarnation = t.previous.tasks.empty() ? 0 : t.previous.tasks[0].incarnation;
    PodView pod = PodBuilder("j", 0, incarnation).On("node-0").Build();
    t.world.preempting_nodes.clear();
    if (step % 2 == 0) {
      pod.disruption_target = true;
      pod.phase = PodPhase::kFailed;
      pod.ready = false;
      t.world.preempting_nodes["node-0"] = absl::InfiniteFuture();
    }
    t.world.task_pods[0] = pod;
    const ReconcilePlan plan = PlanReconcile(t.Inputs());
    for (const EventNote& e : plan.events) {
      if (e.reason == "TaskPreempted") out.moves.push_back(t.now);
      if (e.reason == "MoveLimitReached") {
        ++out.limit_events;
        EXPECT_THAT(e.message, HasSubstr("task 0 was moved off a preemption 3 times within 1m"));
      }
    }
    Json job = Json::object();
    job["status"] = EncodeStatus(plan.status);
    t.previous = DecodeStatus(job);
    out.last = t.previous;
  }
  return out;
}

TEST(MoveBudget, ANodeFlappingEvery100msMovesTheTaskAtMostThreeTimesAMinute) {
  const Flapping f = Flap(absl::Milliseconds(100), absl::Minutes(3));
  // Every window of a minute holds at most 3 moves.
  for (size_t i = 0; i < f.moves.size(); ++i) {
    const auto in_window =
        std::count_if(f.moves.begin() + static_cast<long>(i), f.moves.end(),
                      [&](absl::Time t) { return t < f.moves[i] + kMoveWindow; });
    EXPECT_LE(in_window, kMaxMovesPerWindow) << "from move " << i;
  }
  // The bound holds moves back, it does not stop them: 3 in each of the 3 minutes (and one more
  // at the last step, when the third window ends).
  EXPECT_GE(f.moves.size(), 9u);
  EXPECT_LE(f.moves.size(), 10u);
  // One Warning per hold, not one per flap (the node flapped 1800 times).
  EXPECT_GE(f.limit_events, 2);
  EXPECT_LE(f.limit_events, 4);
  EXPECT_EQ(f.last.preemptions, static_cast<int>(f.moves.size()));
}

TEST(MoveBudget, AHeldTaskWaitsPreemptingWithItsHoldInStatusAndARequeue) {
  TestPass t(TrainingJobBuilder("j").Tasks(2).Grace(absl::Seconds(30)));
  t.previous.tasks.resize(2);
  t.previous.tasks[0].recent_moves = {kNow - absl::Seconds(30), kNow - absl::Seconds(20),
                                      kNow - absl::Seconds(10)};
  t.world.task_pods[0].disruption_target = true;
  t.world.task_pods[0].phase = PodPhase::kFailed;
  ReconcilePlan plan = PlanReconcile(t.Inputs());
  EXPECT_THAT(Reasons(plan.events), ::testing::Contains("MoveLimitReached"));
  EXPECT_THAT(Reasons(plan.events), ::testing::Not(::testing::Contains("TaskPreempted")));
  EXPECT_TRUE(Names(plan.create).empty());
  EXPECT_EQ(plan.status.tasks[0].state, TaskState::kPreempting);
  EXPECT_EQ(plan.status.tasks[0].move_held_until, kNow + absl::Seconds(30));
  EXPECT_EQ(plan.requeue_after, absl::Seconds(30));
  EXPECT_EQ(plan.status.preemptions, 0);

  // The requeue comes back when the oldest move has left the window: the task moves.
  t.previous = plan.status;
  t.now = kNow + absl::Seconds(30);
  plan = PlanReconcile(t.Inputs());
  EXPECT_THAT(Reasons(plan.events), ::testing::Contains("TaskPreempted"));
  EXPECT_THAT(Names(plan.create), ::testing::ElementsAre("j-task-0-1"));
  EXPECT_FALSE(plan.status.tasks[0].move_held_until.has_value());
  EXPECT_EQ(plan.status.tasks[0].recent_moves.size(), 3u);
}

}  // namespace
}  // namespace phalanx::op
