// Table test of goodput accounting (accounting.h).
#include "operator/controller/accounting.h"

#include <gtest/gtest.h>

namespace phalanx::op {
namespace {

const absl::Time kNow = absl::FromUnixSeconds(1'800'000'000);

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

}  // namespace
}  // namespace phalanx::op
