// SyncPointTracker's state machine, one named case per transition (see the diagram in the
// header): events are applied in order and the case asserts the last one's outcome and the
// state it leaves, never how the tracker got there.
#include "runtime/client/sync_point_tracker.h"

#include <string>
#include <variant>
#include <vector>

#include "common/testing/fake_clock.h"
#include "gtest/gtest.h"

namespace phalanx::client {
namespace {

using ::phalanx::testing::FakeClock;

// Events, as the client produces them.
struct RoundArrives {  // OnRound; no deadline unless given
  uint64_t round;
  std::optional<absl::Duration> deadline_in = std::nullopt;
};
struct EarlyAnswer {  // OnEarlyReportAnswer
  uint64_t round;
  absl::StatusOr<int64_t> sync_step;
};
struct CheckStep {  // Check
  int64_t step;
};
struct IsSettled {  // Settled
  uint64_t round;
};
struct WaitEnds {  // AfterWait
  int64_t step;
  uint64_t round;
};
struct OwnAnswer {  // OnOwnReportAnswer
  int64_t step;
  uint64_t round;
  absl::StatusOr<int64_t> sync_step;
};
struct CoordinatorRestarts {};  // Reset
using Event = std::variant<RoundArrives, EarlyAnswer, CheckStep, IsSettled, WaitEnds, OwnAnswer,
                           CoordinatorRestarts>;

// Round `id`, with a deadline `deadline_in` from now (none: no deadline).
coord::PreemptionRound Round(uint64_t id, std::optional<absl::Duration> deadline_in,
                             const FakeClock& clock) {
  coord::PreemptionRound round;
  round.round = id;
  round.deadline = deadline_in ? clock.Now() + *deadline_in : absl::InfiniteFuture();
  return round;
}

std::string Describe(const SyncPointTracker::Next& next) {
  switch (next.action) {
    case SyncPointTracker::Next::Action::kAnswer:
      return next.answer ? "true" : "false";
    case SyncPointTracker::Next::Action::kWait:
      return "wait for r" + std::to_string(next.round.round);
    case SyncPointTracker::Next::Action::kReport:
      return "report for r" + std::to_string(next.round.round);
  }
  return "?";
}

// Applies one event; returns its outcome as text ("" for events without one).
std::string Apply(SyncPointTracker& tracker, FakeClock& clock, const Event& event) {
  if (const auto* e = std::get_if<RoundArrives>(&event)) {
    std::optional<int64_t> report = tracker.OnRound(Round(e->round, e->deadline_in, clock));
    return report ? "report step " + std::to_string(*report) : "no report";
  }
  if (const auto* e = std::get_if<EarlyAnswer>(&event)) {
    tracker.OnEarlyReportAnswer(e->round, e->sync_step);
    return "";
  }
  if (const auto* e = std::get_if<CheckStep>(&event)) return Describe(tracker.Check(e->step));
  if (const auto* e = std::get_if<IsSettled>(&event)) {
    return tracker.Settled(e->round) ? "settled" : "not settled";
  }
  if (const auto* e = std::get_if<WaitEnds>(&event)) {
    return Describe(tracker.AfterWait(e->step, e->round));
  }
  if (const auto* e = std::get_if<OwnAnswer>(&event)) {
    absl::StatusOr<bool> reached = tracker.OnOwnReportAnswer(e->step, e->round, e->sync_step);
    if (!reached.ok()) return std::string(absl::StatusCodeToString(reached.status().code()));
    return *reached ? "true" : "false";
  }
  tracker.Reset();
  return "";
}

struct Case {
  std::string name;
  std::vector<Event> given;
  Event when;
  std::string outcome;
  std::string state;  // SyncPointTracker::DebugString() afterwards
};

const absl::Status kUnavailable = absl::UnavailableError("coordinator restarting");
const absl::Status kNotOpen = absl::FailedPreconditionError("round 1 is not open");
const absl::Status kPastDeadline = absl::DeadlineExceededError("round 1 passed its deadline");

// The events that lead to each state of round 1, named after the state.
const std::vector<Event> kReported = {RoundArrives{1}};
const std::vector<Event> kReportFailed = {RoundArrives{1}, EarlyAnswer{1, kUnavailable}};
const std::vector<Event> kAgreedAt5 = {RoundArrives{1}, EarlyAnswer{1, 5}};
const std::vector<Event> kFinished = {RoundArrives{1}, EarlyAnswer{1, 0}, CheckStep{0}};

std::vector<Case> Cases() {
  return {
      // IDLE
      {"Idle_Check_IsFalseWithoutAnyCall", {}, CheckStep{5}, "false", "IDLE"},
      {"Idle_Round_ReportsStepZeroBeforeAnyCheck",
       {},
       RoundArrives{1},
       "report step 0",
       "REPORTED(r1, s0)"},
      {"Idle_Round_ReportsTheFirstStepNotCheckedYet",
       {CheckStep{3}, CheckStep{4}},
       RoundArrives{1},
       "report step 5",
       "REPORTED(r1, s5)"},
      {"Idle_IsSettled", {}, IsSettled{1}, "settled", "IDLE"},
      // REPORTED
      {"Reported_SameRoundAgain_UpdatesItWithoutASecondReport", kReported,
       RoundArrives{1, absl::Seconds(30)}, "no report", "REPORTED(r1, s0)"},
      {"Reported_NewerRound_StartsOverWithItsOwnReport",
       {CheckStep{2}, RoundArrives{1}},
       RoundArrives{2},
       "report step 3",
       "REPORTED(r2, s3)"},
      {"Reported_EarlyAnswer_Agrees", kReported, EarlyAnswer{1, 7}, "", "AGREED(r1, k7)"},
      {"Reported_EarlyAnswerForAnOlderRound_IsIgnored",
       {RoundArrives{1}, RoundArrives{2}},
       EarlyAnswer{1, 7},
       "",
       "REPORTED(r2, s0)"},
      {"Reported_EarlyReportFailed_LeavesTheReportToTheLoop", kReported,
       EarlyAnswer{1, kUnavailable}, "", "REPORT_FAILED(r1, s0)"},
      {"Reported_RoundNotOpen_EndsIt", kReported, EarlyAnswer{1, kNotOpen}, "", "IDLE after r1"},
      {"Reported_DeadlinePassed_EndsIt", kReported, EarlyAnswer{1, kPastDeadline}, "",
       "IDLE after r1"},
      {"Reported_CheckBelowOwnReport_IsFalseWithoutWaiting",
       {CheckStep{4}, RoundArrives{1}},
       CheckStep{4},
       "false",
       "REPORTED(r1, s5)"},
      {"Reported_CheckAtOwnReport_WaitsForTheAgreement",
       {CheckStep{4}, RoundArrives{1}},
       CheckStep{5},
       "wait for r1",
       "REPORTED(r1, s5)"},
      {"Reported_IsNotSettled", kReported, IsSettled{1}, "not settled", "REPORTED(r1, s0)"},
      {"Reported_AnotherRoundIsSettled",
       {RoundArrives{2}},
       IsSettled{1},
       "settled",
       "REPORTED(r2, s0)"},
      {"Reported_WaitTimedOutWithoutAnAnswer_ReportsItself", kReported, WaitEnds{0, 1},
       "report for r1", "REPORTED(r1, s0)"},
      {"Reported_WaitEndedBecauseTheRoundClosed_IsFalse",
       {RoundArrives{1}, EarlyAnswer{1, kPastDeadline}},
       WaitEnds{0, 1},
       "false",
       "IDLE after r1"},
      {"Reported_WaitEndedBecauseANewerRoundOpened_IsFalse",
       {RoundArrives{1}, RoundArrives{2}},
       WaitEnds{0, 1},
       "false",
       "REPORTED(r2, s0)"},
      // REPORT_FAILED
      {"ReportFailed_IsSettled", kReportFailed, IsSettled{1}, "settled", "REPORT_FAILED(r1, s0)"},
      {"ReportFailed_Check_ReportsItself", kReportFailed, CheckStep{3}, "report for r1",
       "REPORT_FAILED(r1, s0)"},
      {"ReportFailed_OwnReportAnsweredWithALaterStep_Agrees", kReportFailed, OwnAnswer{3, 1, 6},
       "false", "AGREED(r1, k6)"},
      {"ReportFailed_OwnReportAnsweredWithThisStep_IsTrueAndEndsTheRound", kReportFailed,
       OwnAnswer{3, 1, 3}, "true", "IDLE after r1"},
      {"ReportFailed_OwnReportFailsAgain_ReturnsTheErrorAndKeepsTheRound", kReportFailed,
       OwnAnswer{3, 1, kUnavailable}, "UNAVAILABLE", "REPORT_FAILED(r1, s0)"},
      {"ReportFailed_OwnReportFindsTheRoundClosed_ReturnsTheErrorAndEndsIt", kReportFailed,
       OwnAnswer{3, 1, kNotOpen}, "FAILED_PRECONDITION", "IDLE after r1"},
      // AGREED
      {"Agreed_IsSettled", kAgreedAt5, IsSettled{1}, "settled", "AGREED(r1, k5)"},
      {"Agreed_CheckBeforeTheSyncStep_IsFalse", kAgreedAt5, CheckStep{4}, "false",
       "AGREED(r1, k5)"},
      {"Agreed_CheckAtTheSyncStep_IsTrueAndEndsTheRound", kAgreedAt5, CheckStep{5}, "true",
       "IDLE after r1"},
      {"Agreed_CheckPastTheSyncStep_IsFalseAndEndsTheRound", kAgreedAt5, CheckStep{6}, "false",
       "IDLE after r1"},
      {"Agreed_WaitEnded_AnswersFromTheAgreement", kAgreedAt5, WaitEnds{5, 1}, "true",
       "IDLE after r1"},
      {"Agreed_LateEarlyReportFailure_KeepsTheAgreement",
       {RoundArrives{1}, OwnAnswer{0, 1, 5}},
       EarlyAnswer{1, kUnavailable},
       "",
       "AGREED(r1, k5)"},
      {"Agreed_DeadlinePassed_EndsTheRound", kAgreedAt5, EarlyAnswer{1, kPastDeadline}, "",
       "IDLE after r1"},
      // Finished rounds and coordinator restarts
      {"Finished_TheSameRoundAgain_IsIgnored", kFinished, RoundArrives{1}, "no report",
       "IDLE after r1"},
      {"Finished_TheNextRound_Opens", kFinished, RoundArrives{2}, "report step 1",
       "REPORTED(r2, s1)"},
      {"Restart_DuringARound_DropsIt", kReported, CoordinatorRestarts{}, "", "IDLE"},
      {"Restart_LetsRoundOneOpenAgain",
       {RoundArrives{1}, EarlyAnswer{1, 0}, CheckStep{0}, CoordinatorRestarts{}},
       RoundArrives{1},
       "report step 1",
       "REPORTED(r1, s1)"},
  };
}

TEST(SyncPointTrackerTest, Transitions) {
  for (const Case& c : Cases()) {
    SCOPED_TRACE(c.name);
    FakeClock clock;
    SyncPointTracker tracker(clock);
    for (const Event& event : c.given) Apply(tracker, clock, event);
    EXPECT_EQ(Apply(tracker, clock, c.when), c.outcome);
    EXPECT_EQ(tracker.DebugString(), c.state);
  }
}

TEST(SyncPointTrackerTest, RoundWait_RunsToTheDeadline_AtLeastOneSecond) {
  struct WaitCase {
    std::string name;
    std::optional<absl::Duration> deadline_in;  // none: the round has no deadline
    absl::Duration elapsed;                     // FakeClock advance after the round arrived
    absl::Duration want;
  };
  const std::vector<WaitCase> cases = {
      {"NoDeadline_TenMinutes", std::nullopt, absl::Minutes(5), absl::Minutes(10)},
      {"FreshDeadline_AllOfIt", absl::Seconds(30), absl::ZeroDuration(), absl::Seconds(30)},
      {"ShrinksAsTimePasses", absl::Seconds(30), absl::Seconds(20), absl::Seconds(10)},
      {"NearTheDeadline_StillOneSecond", absl::Seconds(30), absl::Seconds(29.5), absl::Seconds(1)},
      {"PastTheDeadline_StillOneSecond", absl::Seconds(30), absl::Minutes(2), absl::Seconds(1)},
  };
  for (const WaitCase& c : cases) {
    SCOPED_TRACE(c.name);
    FakeClock clock;
    SyncPointTracker tracker(clock);
    const coord::PreemptionRound round = Round(1, c.deadline_in, clock);
    clock.Advance(c.elapsed);
    EXPECT_EQ(tracker.RoundWait(round), c.want);
  }
}

TEST(SyncPointTrackerTest, Phase_FollowsTheRound) {
  FakeClock clock;
  SyncPointTracker tracker(clock);
  EXPECT_EQ(tracker.phase(), SyncPointTracker::Phase::kIdle);
  tracker.OnRound(Round(1, std::nullopt, clock));
  EXPECT_EQ(tracker.phase(), SyncPointTracker::Phase::kReported);
  tracker.OnEarlyReportAnswer(1, kUnavailable);
  EXPECT_EQ(tracker.phase(), SyncPointTracker::Phase::kReportFailed);
  tracker.OnEarlyReportAnswer(1, 4);
  EXPECT_EQ(tracker.phase(), SyncPointTracker::Phase::kAgreed);
  EXPECT_TRUE(tracker.Check(4).answer);
  EXPECT_EQ(tracker.phase(), SyncPointTracker::Phase::kIdle);
}

}  // namespace
}  // namespace phalanx::client
