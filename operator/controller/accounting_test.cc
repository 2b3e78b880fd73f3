// Table test of goodput accounting (accounting.h).
#include "operator/controller/accounting.h"

#include <gtest/gtest.h>

#include "operator/api/codec.h"
#include "operator/controller/metrics.h"
#include "operator/controller/plan_testing.h"

namespace phalanx::op {
namespace {

using builders::kNow;
using builders::PodBuilder;
using builders::TrainingJobBuilder;

TEST(AccountTime, Table) {
  struct Case {
    std::string name;
    std::string previous_phase;
    int previous_restarts;
    std::optional<absl::Duration> accounted_ago;  // nullopt: never accounted
    std::string phase;                            // this pass's
    double want_productive;
    double want_lost;
    bool want_booked;  // accounted_until moved to now
  };
  const Case cases[] = {
      {"firstPassStartsTheClock", kPhasePending, 0, std::nullopt, kPhasePending, 0, 0, true},
      {"steadyAndRecentBooksNothing", kPhaseRunning, 0, absl::Seconds(10), kPhaseRunning, 0, 0,
       false},
      {"steadyAfterThePeriodBooksRunningAsProductive", kPhaseRunning, 0, absl::Seconds(40),
       kPhaseRunning, 40, 0, true},
      {"aPhaseChangeBooksAtOnce", kPhaseRunning, 0, absl::Seconds(3), kPhaseRestarting, 3, 0, true},
      {"restartingIsLost", kPhaseRestarting, 1, absl::Seconds(3), kPhaseRunning, 0, 3, true},
      {"startingAfterARestartIsLost", kPhaseStarting, 1, absl::Seconds(5), kPhaseRunning, 0, 5,
       true},
      {"blockedAfterARestartIsLost", kPhaseBlocked, 2, absl::Seconds(5), kPhaseRunning, 0, 5, true},
      {"startingTheFirstTimeIsNeither", kPhaseStarting, 0, absl::Seconds(5), kPhaseRunning, 0, 0,
       true},
      {"suspendedIsNeither", kPhaseSuspended, 0, absl::Seconds(50), kPhaseSuspended, 0, 0, true},
      {"aFinishedJobBooksNothing", kPhaseSucceeded, 0, absl::Seconds(50), kPhaseSucceeded, 0, 0,
       false},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    TrainingJobStatus previous;
    previous.phase = c.previous_phase;
    previous.restarts = c.previous_restarts;
    if (c.accounted_ago.has_value()) previous.accounted_until = kNow - *c.accounted_ago;
    TrainingJobStatus status = previous;
    status.phase = c.phase;
    AccountTime(previous, status, kNow);
    EXPECT_DOUBLE_EQ(status.productive_seconds, c.want_productive);
    EXPECT_DOUBLE_EQ(status.lost_seconds, c.want_lost);
    EXPECT_EQ(status.accounted_until,
              c.want_booked ? std::optional<absl::Time>(kNow) : previous.accounted_until);
  }
}

// --- The three late-known losses (accounting.h), one at a time --------------------------------

// A job Running since 10 s before kNow, booked up to 5 s before kNow.
TrainingJobStatus RunningJob() {
  TrainingJobStatus s;
  s.phase = kPhaseRunning;
  s.start_time = kNow - absl::Seconds(10);
  s.conditions.push_back({"Running", "True", "AllTasksRunning", "", kNow - absl::Seconds(10), 0});
  s.productive_seconds = 5;
  s.accounted_until = kNow - absl::Seconds(5);
  return s;
}

TEST(AccountTime, AFailureFoundNowMovesItsSpanSinceTheFailureFromProductiveToLost) {
  const TrainingJobStatus previous = RunningJob();
  TrainingJobStatus status = previous;
  status.phase = kPhaseRestarting;
  GoodputFacts facts;
  facts.failed_since = kNow - absl::Seconds(4);
  AccountTime(previous, status, kNow, facts);
  // 10 s Running, of which the last 4 were a dead task nobody had noticed yet.
  EXPECT_DOUBLE_EQ(status.productive_seconds, 6);
  EXPECT_DOUBLE_EQ(status.lost_seconds, 4);
  EXPECT_DOUBLE_EQ(status.goodput.detection_seconds, 4);
  EXPECT_EQ(status.goodput.detection_booked_until, kNow);
  // The same failure seen again on the next pass (a back-off, an operator restart) moves
  // nothing more.
  TrainingJobStatus again = status;
  again.conditions[0] = {"Running", "False", "Restarting", "", kNow, 0};
  TrainingJobStatus next = again;
  AccountTime(again, next, kNow + absl::Seconds(1), facts);
  EXPECT_DOUBLE_EQ(next.productive_seconds, 6);
  EXPECT_DOUBLE_EQ(next.lost_seconds, 4);  // Restarting goes on: booked with the next change
  EXPECT_DOUBLE_EQ(next.goodput.detection_seconds, 4);
  EXPECT_EQ(next.accounted_until, kNow);
}

TEST(AccountTime, AFailureBeforeTheJobRanMovesOnlyItsRunningPart) {
  const TrainingJobStatus previous = RunningJob();
  TrainingJobStatus status = previous;
  GoodputFacts facts;
  facts.failed_since = kNow - absl::Seconds(60);  // long before Running began
  AccountTime(previous, status, kNow, facts);
  EXPECT_DOUBLE_EQ(status.productive_seconds, 0);
  EXPECT_DOUBLE_EQ(status.lost_seconds, 10);
}

TEST(AccountTime, RunningWhileTheCoordinatorIsDownIsLost) {
  const TrainingJobStatus previous = RunningJob();
  TrainingJobStatus down = previous;
  GoodputFacts facts;
  facts.coordinator_up = false;
  AccountTime(previous, down, kNow, facts);  // the outage begins: books what came before
  EXPECT_DOUBLE_EQ(down.productive_seconds, 10);
  EXPECT_EQ(down.goodput.coordinator_down_since, kNow);
  TrainingJobStatus still = down;
  AccountTime(down, still, kNow + absl::Seconds(2), facts);  // no change: nothing booked yet
  EXPECT_EQ(still.accounted_until, kNow);
  TrainingJobStatus up = still;
  AccountTime(still, up, kNow + absl::Seconds(3), {});
  EXPECT_DOUBLE_EQ(up.productive_seconds, 10);
  EXPECT_DOUBLE_EQ(up.lost_seconds, 3);
  EXPECT_DOUBLE_EQ(up.goodput.coordinator_outage_seconds, 3);
  EXPECT_FALSE(up.goodput.coordinator_down_since.has_value());
}

TEST(AccountTime, ACoordinatorDownBeforeTheJobRunsCostsNothing) {
  TrainingJobStatus previous;
  previous.phase = kPhaseStarting;
  previous.accounted_until = kNow - absl::Seconds(5);
  TrainingJobStatus status = previous;
  GoodputFacts facts;
  facts.coordinator_up = false;
  AccountTime(previous, status, kNow, facts);
  EXPECT_FALSE(status.goodput.coordinator_down_since.has_value());
  EXPECT_DOUBLE_EQ(status.lost_seconds, 0);
}

TEST(AccountTime, RolledBackWorkIsMovedOncePerCoordinatorTotal) {
  const TrainingJobStatus previous = RunningJob();
  TrainingJobStatus status = previous;
  GoodputFacts facts;
  facts.rolled_back = RolledBackReport{"c1", 3};
  AccountTime(previous, status, kNow, facts);
  EXPECT_DOUBLE_EQ(status.productive_seconds, 7);  // 10 booked, 3 of them thrown away
  EXPECT_DOUBLE_EQ(status.lost_seconds, 3);
  // The same total again: nothing; a larger one: the difference.
  TrainingJobStatus same = status;
  AccountTime(status, same, kNow + absl::Seconds(1), facts);
  EXPECT_DOUBLE_EQ(same.lost_seconds, 3);
  facts.rolled_back = RolledBackReport{"c1", 5};
  TrainingJobStatus more = same;
  AccountTime(same, more, kNow + absl::Seconds(2), facts);
  EXPECT_DOUBLE_EQ(more.lost_seconds, 5);
  // A restarted coordinator counts from 0 under a new id: its total is all new.
  facts.rolled_back = RolledBackReport{"c2", 1};
  TrainingJobStatus restarted = more;
  AccountTime(more, restarted, kNow + absl::Seconds(3), facts);
  EXPECT_DOUBLE_EQ(restarted.lost_seconds, 6);
  EXPECT_DOUBLE_EQ(restarted.goodput.rolled_back_seconds, 6);
  EXPECT_DOUBLE_EQ(restarted.productive_seconds + restarted.lost_seconds, 10 + 3);
}

TEST(AccountTime, NeverMovesMoreThanWasBookedProductive) {
  TrainingJobStatus previous = RunningJob();
  previous.accounted_until = kNow;
  previous.productive_seconds = 2;
  TrainingJobStatus status = previous;
  GoodputFacts facts;
  facts.rolled_back = RolledBackReport{"c1", 50};
  AccountTime(previous, status, kNow, facts);
  EXPECT_DOUBLE_EQ(status.productive_seconds, 0);
  EXPECT_DOUBLE_EQ(status.lost_seconds, 2);
}

// --- A scripted timeline through the whole planner (plan.h) on fake times ---------------------
//
//   0 s   job created, pods pending          41 s  the coordinator declares task 1 failed:
//   10 s  every task Running                        heartbeat timeout, last heard at 36 s
//   46 s  the operator restarts task 1 (it waited kExitStatusWait for an exit status a hung
//         process never gives)              50 s  the replacement runs
//   52 s  the workers report 12 s of work rolled back (coordinator c1)
//   70-75 s the coordinator pod is not ready (it comes back as c2, whose total is 0)
//   100 s every task succeeded
//
// The rule (accounting.h) gives: Running 10-41 and 50-100, less the outage 70-75, less the
// span from the last word (36 s) to the end of Running (41 s), less the 12 s rolled back, is
// productive: 31 + 50 - 5 - 5 - 12 = 59 s. Lost: 36-41 (detection) + 41-50 (a task awaiting
// its exit status, then restarting) + 70-75 + 12 = 5 + 9 + 5 + 12 = 31 s. 59 + 31 = 90 = the
// 100 s less the first start.
class GoodputTimeline {
 public:
  // `fresh_operator`: every pass starts from the status as written (encoded and decoded, as an
  // operator that restarted reads it), and each step is run twice (a restarted operator's first
  // pass repeats the last one's view).
  explicit GoodputTimeline(bool fresh_operator) : fresh_(fresh_operator) {
    world_.has_secret = world_.has_coordinator_service = world_.has_tasks_service = true;
    world_.coordinator = PodBuilder::Coordinator("j").Build();
    world_.rolled_back = RolledBackReport{"c1", 0};
    for (int i = 0; i < 2; ++i) {
      world_.task_pods.push_back(PodBuilder("j", i).Phase(PodPhase::kPending).NotReady().Build());
    }
  }

  void At(double seconds) {
    Pass(seconds);
    if (fresh_) Pass(seconds + 0.25);
  }

  JobObservation& world() { return world_; }
  const TrainingJobStatus& status() const { return status_; }

 private:
  void Pass(double seconds) {
    const TrainingJobSpec spec = builder_.Spec();
    const Json job = builder_.Build();
    TrainingJobStatus previous = status_;
    if (fresh_) {
      Json written = job;
      written["status"] = EncodeStatus(status_);
      previous = DecodeStatus(written);
    }
    CoordinatorPlacement placement;
    const ReconcilePlan plan = PlanReconcile(
        {job, spec, previous, world_, placement, "tok", kStart + absl::Seconds(seconds)});
    status_ = plan.status;
  }

  const absl::Time kStart = kNow;
  TrainingJobBuilder builder_ = TrainingJobBuilder("j").Tasks(2);
  const bool fresh_;
  JobObservation world_;
  TrainingJobStatus status_;
};

void RunTimeline(GoodputTimeline& t) {
  JobObservation& w = t.world();
  t.At(0);
  EXPECT_EQ(t.status().phase, kPhasePending);
  for (PodView& pod : w.task_pods) pod = PodBuilder("j", pod.index).Build();
  t.At(10);
  ASSERT_EQ(t.status().phase, kPhaseRunning);
  t.At(30);
  w.coordinator_failed[1] = {0, "heartbeat timeout: none for 5s", kNow + absl::Seconds(36)};
  t.At(41);
  t.At(44);
  ASSERT_EQ(t.status().tasks[1].incarnation, 0) << "still awaiting the exit status";
  t.At(46);
  ASSERT_EQ(t.status().tasks[1].incarnation, 1)
      << "restarted at 46 s, kExitStatusWait after the coordinator's word";
  w.task_pods[1] = PodBuilder("j", 1, 1).Phase(PodPhase::kPending).NotReady().Build();
  t.At(47);
  w.task_pods[1] = PodBuilder("j", 1, 1).Build();
  w.coordinator_failed.clear();  // incarnation 1 registered
  t.At(50);
  ASSERT_EQ(t.status().phase, kPhaseRunning);
  w.rolled_back = RolledBackReport{"c1", 12};
  t.At(52);
  t.At(60);
  w.coordinator->ready = false;
  t.At(70);
  t.At(72);
  w.coordinator->ready = true;
  w.rolled_back = RolledBackReport{"c2", 0};
  t.At(75);
  t.At(90);
  for (PodView& pod : w.task_pods) pod.phase = PodPhase::kSucceeded;
  t.At(100);
  ASSERT_EQ(t.status().phase, kPhaseSucceeded);

  const TrainingJobStatus& s = t.status();
  EXPECT_DOUBLE_EQ(s.productive_seconds, 59);
  EXPECT_DOUBLE_EQ(s.lost_seconds, 31);
  EXPECT_DOUBLE_EQ(s.goodput.detection_seconds, 5);
  EXPECT_DOUBLE_EQ(s.goodput.coordinator_outage_seconds, 5);
  EXPECT_DOUBLE_EQ(s.goodput.rolled_back_seconds, 12);
}

TEST(GoodputTimeline, AHangAnOutageAndARollbackAreLostExactly) {
  GoodputTimeline t(/*fresh_operator=*/false);
  RunTimeline(t);
}

TEST(GoodputTimeline, AnOperatorRestartedBeforeEveryPassBooksTheSame) {
  GoodputTimeline t(/*fresh_operator=*/true);
  RunTimeline(t);
}

// With workers that report their steps (ReportStepping), over 100 s:
//   0-10   Pending: before the first step;
//   10     every pod Running; the workers resolve names, rendezvous, load (no step yet);
//   25     their first step (the coordinator's word, seen by the pass at 26);
//   40     task 1 crashes (the coordinator heard its session end); detection 40-41;
//   41-53  awaiting its exit status, restarting, its replacement starting: lost by phase;
//   53     every pod Running again, but the group re-forms: regroup, until
//   60     the replacement's first step (the coordinator's word, seen by the pass at 61);
//   100    done.
// Productive: 25-40 and 60-100 = 55 s. Lost: 1 (detection) + 12 (phases) + 7 (regroup) = 20 s.
// Before the first step: 10 (Pending) + 15 (Running, no step yet) = 25 s. 55 + 20 + 25 = 100.
// Before stepping was reported, 53-60 counted productive and so did 10-25.
void RunSteppingTimeline(GoodputTimeline& t) {
  JobObservation& w = t.world();
  auto at = [](double seconds) { return kNow + absl::Seconds(seconds); };
  t.At(0);
  for (PodView& pod : w.task_pods) pod = PodBuilder("j", pod.index).Build();
  t.At(10);
  ASSERT_EQ(t.status().phase, kPhaseRunning);
  w.stepping = {at(25), at(25), std::nullopt, false};
  t.At(26);
  EXPECT_EQ(t.status().goodput.first_step_time, at(25));
  t.At(35);
  w.task_pods[1] = PodBuilder("j", 1).Failed(137).Build();
  w.task_pods[1].finished_at = at(40);
  w.coordinator_failed[1] = {0, "session broken", at(40)};
  w.stepping = {at(25), at(25), at(40), true};
  t.At(41);
  ASSERT_NE(t.status().phase, kPhaseRunning);
  t.At(44);
  t.At(50);
  ASSERT_EQ(t.status().tasks[1].incarnation, 1);
  w.task_pods[1] = PodBuilder("j", 1, 1).Phase(PodPhase::kPending).NotReady().Build();
  t.At(51);
  w.task_pods[1] = PodBuilder("j", 1, 1).Build();
  w.coordinator_failed.clear();  // incarnation 1 registered
  t.At(53);
  ASSERT_EQ(t.status().phase, kPhaseRunning);
  t.At(55);
  w.stepping = {at(25), at(60), at(40), false};
  t.At(61);
  t.At(80);
  for (PodView& pod : w.task_pods) pod.phase = PodPhase::kSucceeded;
  t.At(100);
  ASSERT_EQ(t.status().phase, kPhaseSucceeded);

  const TrainingJobStatus& s = t.status();
  EXPECT_DOUBLE_EQ(s.productive_seconds, 55);
  EXPECT_DOUBLE_EQ(s.lost_seconds, 20);
  EXPECT_DOUBLE_EQ(s.goodput.detection_seconds, 1);
  EXPECT_DOUBLE_EQ(s.goodput.regroup_seconds, 7);
  EXPECT_DOUBLE_EQ(s.goodput.before_first_step_seconds, 25);
}

// The first step heard of late (an operator that was away): the productive time of an earlier
// Running stretch after the first step stays productive.
TEST(AccountTime, AFirstStepHeardOfLateMovesOnlyWhatRanBeforeIt) {
  TrainingJobStatus previous = RunningJob();  // Running since kNow-10 s, booked to kNow-5 s
  previous.start_time = kNow - absl::Seconds(100);
  previous.productive_seconds = 80;  // earlier stretches, most of it after the first step
  previous.conditions[0].last_transition_time = kNow - absl::Seconds(10);
  TrainingJobStatus status = previous;
  GoodputFacts facts;
  facts.stepping.first_step = kNow - absl::Seconds(90);  // 10 s after the job started
  AccountTime(previous, status, kNow, facts);
  EXPECT_DOUBLE_EQ(status.goodput.before_first_step_seconds, 10);
  EXPECT_DOUBLE_EQ(status.productive_seconds, 75);  // 80 + 5 booked now - 10 moved
}

TEST(GoodputTimeline, TheTimeBeforeTheFirstStepAndARegroupAreNotProductive) {
  GoodputTimeline t(/*fresh_operator=*/false);
  RunSteppingTimeline(t);
}

TEST(GoodputTimeline, AnOperatorRestartedBeforeEveryPassBooksTheStepsTheSame) {
  GoodputTimeline t(/*fresh_operator=*/true);
  RunSteppingTimeline(t);
}

// The metrics follow the status: productive time moved to lost makes the productive change
// negative, which a counter cannot follow; it counts as rebooked instead, so that productive -
// rebooked is what status.productiveSeconds says.
double CounterValue(prometheus::Registry& registry, const std::string& name) {
  for (const prometheus::MetricFamily& family : registry.Collect()) {
    if (family.name == name) return family.metric.at(0).counter.value;
  }
  return -1;
}

TEST(OperatorMetricsGoodput, ProductiveTimeFoundLostCountsAsRebooked) {
  prometheus::Registry registry;
  OperatorMetrics metrics(registry);
  metrics.Goodput(31, 0);  // Running 10-41 booked
  metrics.Goodput(-5, 5);  // the hang found: 5 s of it moved
  EXPECT_DOUBLE_EQ(CounterValue(registry, "phalanx_operator_productive_seconds_total") -
                       CounterValue(registry, "phalanx_operator_rebooked_seconds_total"),
                   26);
  EXPECT_DOUBLE_EQ(CounterValue(registry, "phalanx_operator_lost_seconds_total"), 5);
}

}  // namespace
}  // namespace phalanx::op
