// What the coordinator tells the operator for goodput: the rolled-back total (rollback_ledger.h,
// CoordinationService::ReportRolledBack), whether the tasks are stepping (stepping_tracker.h,
// ReportStepping) and when it last heard from each task (a hang is lost from its last
// heartbeat, a crash from its session's end).
#include "absl/strings/str_cat.h"
#include "common/testing/fake_clock.h"
#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "prometheus/registry.h"
#include "runtime/coordination/rollback_ledger.h"
#include "runtime/coordination/service.h"
#include "runtime/coordination/service_test_util.h"
#include "runtime/coordination/stepping_tracker.h"

namespace phalanx::coord {
namespace {

using ::phalanx::coord::testing::RecordingSession;
using ::phalanx::coord::testing::Slot;
using ::phalanx::testing::IsOk;
using ::phalanx::testing::StatusIs;

// The value of an OK StatusOr, or a marker that fails the comparison.
template <typename T>
T Value(const absl::StatusOr<T>& v) {
  EXPECT_THAT(v.status(), IsOk());
  return v.ok() ? *v : T(-1);
}

TEST(RollbackLedger, EachRecoveryCountsOnceAtItsLargestReport) {
  RollbackLedger ledger;
  EXPECT_TRUE(Value(ledger.Report("e1", absl::Seconds(3))));
  EXPECT_TRUE(Value(ledger.Report("e1", absl::Seconds(4))));  // a slower task of the same one
  EXPECT_FALSE(Value(ledger.Report("e1", absl::Seconds(2))));
  EXPECT_DOUBLE_EQ(ledger.total_seconds(), 4);
  EXPECT_TRUE(Value(ledger.Report("e2", absl::Milliseconds(1500))));
  EXPECT_DOUBLE_EQ(ledger.total_seconds(), 5.5);
}

TEST(RollbackLedger, RefusesGarbage) {
  RollbackLedger ledger;
  EXPECT_THAT(ledger.Report("", absl::Seconds(1)), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ledger.Report(std::string(RollbackLedger::kMaxNameBytes + 1, 'x'), absl::Seconds(1)),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ledger.Report("e", -absl::Seconds(1)), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ledger.Report("e", absl::InfiniteDuration()),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_DOUBLE_EQ(ledger.total_seconds(), 0);
}

TEST(RollbackLedger, KeepsTheTotalWhenItForgetsOldRecoveries) {
  RollbackLedger ledger;
  for (size_t i = 0; i <= RollbackLedger::kMaxRecoveries; ++i) {
    ASSERT_THAT(ledger.Report(absl::StrCat("e", i), absl::Seconds(1)).status(), IsOk());
  }
  EXPECT_DOUBLE_EQ(ledger.total_seconds(), RollbackLedger::kMaxRecoveries + 1);
}

// --- Stepping: the tracker's drawing (stepping_tracker.h), edge by edge ----------------------

const absl::Time kT0 = absl::FromUnixSeconds(1'700'000'000);
absl::Time At(int seconds) { return kT0 + absl::Seconds(seconds); }

TEST(SteppingTracker, AFailureBeforeTheFirstStepIsNoRegroup) {
  SteppingTracker t;
  EXPECT_FALSE(t.OnFailure(5, At(1)));
  EXPECT_TRUE(t.OnStep(3, At(2)));  // whoever reports first: the job's first step
  EXPECT_EQ(t.state(), (SteppingState{At(2), At(2), absl::InfinitePast(), false}));
  EXPECT_FALSE(t.OnStep(9, At(3)));  // stepping already
  EXPECT_EQ(t.state().first_step, At(2));
}

TEST(SteppingTracker, ARegroupEndsWithAReportFromATaskThatRegisteredAfterTheFailure) {
  SteppingTracker t;
  ASSERT_TRUE(t.OnStep(3, At(2)));
  EXPECT_TRUE(t.OnFailure(10, At(20)));
  EXPECT_TRUE(t.state().regrouping);
  EXPECT_EQ(t.state().regroup_since, At(20));
  // A survivor's report (its state began before the failure) may predate its news of it.
  EXPECT_FALSE(t.OnStep(4, At(21)));
  EXPECT_FALSE(t.OnStep(10, At(21)));
  EXPECT_TRUE(t.state().regrouping);
  // The replacement's first step.
  EXPECT_TRUE(t.OnStep(12, At(26)));
  EXPECT_EQ(t.state(), (SteppingState{At(2), At(26), At(20), false}));
}

TEST(SteppingTracker, ASecondFailureDuringARegroupNeedsItsOwnReplacement) {
  SteppingTracker t;
  ASSERT_TRUE(t.OnStep(3, At(2)));
  ASSERT_TRUE(t.OnFailure(10, At(20)));
  EXPECT_FALSE(t.OnFailure(14, At(22)));  // the regroup started with the first
  EXPECT_FALSE(t.OnStep(12, At(25)));     // the first one's replacement cannot step alone
  EXPECT_TRUE(t.OnStep(15, At(27)));
  EXPECT_EQ(t.state().regroup_since, At(20));
  EXPECT_EQ(t.state().stepping_since, At(27));
}

TEST(SteppingTracker, ARegroupNeverReachesBackBeforeTheSteppingThatPrecededIt) {
  SteppingTracker t;
  ASSERT_TRUE(t.OnStep(3, At(2)));
  ASSERT_TRUE(t.OnFailure(10, At(20)));
  ASSERT_TRUE(t.OnStep(12, At(26)));
  // A hang found late: its last word came before the group stepped again.
  EXPECT_TRUE(t.OnFailure(20, At(24)));
  EXPECT_EQ(t.state().regroup_since, At(26));
}

class GoodputReportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    CoordinationService::Options options;
    options.num_tasks = 2;
    options.heartbeat_interval = absl::Milliseconds(500);
    options.heartbeat_timeout = absl::Seconds(2);
    options.coordinator_id = "c1";
    auto service = CoordinationService::Create(options, clock_, metrics_);
    ASSERT_THAT(service, IsOk());
    service_ = *std::move(service);
    for (int i = 0; i < 2; ++i) {
      ASSERT_THAT(service_->Register({i, 0}), IsOk());
      auto id = service_->OpenSession({i, 0}, sessions_[i].outbox());
      ASSERT_THAT(id, IsOk());
      session_ids_[i] = *id;
    }
  }
  TaskInfo Task(int i) { return service_->Snapshot().tasks[i]; }

  phalanx::testing::FakeClock clock_;
  prometheus::Registry registry_;
  CoordinatorMetrics metrics_{registry_};
  std::unique_ptr<CoordinationService> service_;
  RecordingSession sessions_[2];
  uint64_t session_ids_[2] = {};
};

TEST_F(GoodputReportTest, ReportRolledBack_TotalsRecoveriesAndWakesTheWatcher) {
  const uint64_t version = service_->Snapshot().version;
  Slot<JobSnapshot> watched;
  service_->WatchJobState(version, absl::Seconds(30), watched.Callback());
  EXPECT_DOUBLE_EQ(Value(service_->ReportRolledBack({0, 0}, "e1", absl::Seconds(3))), 3.0);
  ASSERT_TRUE(watched.done());
  EXPECT_DOUBLE_EQ(watched.value().rolled_back_seconds, 3);
  EXPECT_GT(watched.value().version, version);
  EXPECT_DOUBLE_EQ(Value(service_->ReportRolledBack({1, 0}, "e1", absl::Seconds(2))), 3.0);
  EXPECT_DOUBLE_EQ(service_->Snapshot().rolled_back_seconds, 3);
  // Only a registered, current incarnation may report.
  EXPECT_THAT(service_->ReportRolledBack({1, 7}, "e2", absl::Seconds(2)),
              StatusIs(absl::StatusCode::kFailedPrecondition));
}

TEST_F(GoodputReportTest, ReportStepping_TellsTheWatcherOfTheFirstStepAndOfARegroup) {
  uint64_t version = service_->Snapshot().version;
  clock_.Advance(absl::Seconds(3));
  Slot<JobSnapshot> first;
  service_->WatchJobState(version, absl::Seconds(30), first.Callback());
  ASSERT_THAT(service_->ReportStepping({1, 0}), IsOk());
  ASSERT_TRUE(first.done());
  EXPECT_EQ(first.value().stepping.first_step, clock_.Now());
  version = first.value().version;
  ASSERT_THAT(service_->ReportStepping({0, 0}), IsOk());  // no news: no version
  EXPECT_EQ(service_->Snapshot().version, version);

  // Task 1 crashes: the regroup starts when its session broke.
  clock_.Advance(absl::Seconds(2));
  const absl::Time crashed = clock_.Now();
  service_->CloseSession(session_ids_[1], absl::UnavailableError("connection reset"));
  JobSnapshot s = service_->Snapshot();
  EXPECT_TRUE(s.stepping.regrouping);
  EXPECT_EQ(s.stepping.regroup_since, crashed);
  // The survivor steps no group alone.
  ASSERT_THAT(service_->ReportStepping({0, 0}), IsOk());
  EXPECT_TRUE(service_->Snapshot().stepping.regrouping);
  // The replacement registers and reports its first step: the regroup ends.
  clock_.Advance(absl::Seconds(4));
  ASSERT_THAT(service_->Register({1, 1}), IsOk());
  clock_.Advance(absl::Seconds(1));
  ASSERT_THAT(service_->ReportStepping({1, 1}), IsOk());
  s = service_->Snapshot();
  EXPECT_FALSE(s.stepping.regrouping);
  EXPECT_EQ(s.stepping.stepping_since, clock_.Now());
  EXPECT_EQ(s.stepping.regroup_since, crashed);
  // Only the current incarnation may report.
  EXPECT_THAT(service_->ReportStepping({1, 0}), StatusIs(absl::StatusCode::kAborted));
}

TEST_F(GoodputReportTest, AnUnnoticedRestartStartsARegroupToo) {
  ASSERT_THAT(service_->ReportStepping({0, 0}), IsOk());
  clock_.Advance(absl::Seconds(1));
  const absl::Time last_heard = clock_.Now();
  service_->Heartbeat(session_ids_[1], 0);
  clock_.Advance(absl::Milliseconds(500));
  ASSERT_THAT(service_->Register({1, 1}), IsOk());  // incarnation 0 died unnoticed
  const JobSnapshot s = service_->Snapshot();
  EXPECT_TRUE(s.stepping.regrouping);
  EXPECT_EQ(s.stepping.regroup_since, last_heard);
  ASSERT_THAT(service_->ReportStepping({1, 1}), IsOk());
  EXPECT_FALSE(service_->Snapshot().stepping.regrouping);
}

TEST_F(GoodputReportTest, AHungTaskWasLastHeardAtItsLastHeartbeat) {
  const absl::Time registered = clock_.Now();
  EXPECT_EQ(Task(0).last_heard, registered);
  clock_.Advance(absl::Seconds(1));
  service_->Heartbeat(session_ids_[0], 0);
  service_->Heartbeat(session_ids_[1], 0);
  const absl::Time last_heartbeat = clock_.Now();
  clock_.Advance(absl::Seconds(1));
  service_->Heartbeat(session_ids_[1], 0);  // task 0 hangs
  clock_.Advance(absl::Milliseconds(1500));
  service_->Tick(clock_.Now());
  ASSERT_EQ(Task(0).state, TaskState::kFailed);
  EXPECT_EQ(Task(0).last_heard, last_heartbeat);
  // It stays so while the operator has not reacted.
  clock_.Advance(absl::Seconds(5));
  EXPECT_EQ(Task(0).last_heard, last_heartbeat);
}

TEST_F(GoodputReportTest, ACrashedTaskWasLastHeardWhenItsSessionBroke) {
  clock_.Advance(absl::Milliseconds(1200));  // after its last heartbeat, before the timeout
  service_->CloseSession(session_ids_[1], absl::UnavailableError("connection reset"));
  ASSERT_EQ(Task(1).state, TaskState::kFailed);
  EXPECT_EQ(Task(1).last_heard, clock_.Now());
}

}  // namespace
}  // namespace phalanx::coord
