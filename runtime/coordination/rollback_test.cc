// What the coordinator tells the operator for goodput: the rolled-back total (rollback_ledger.h,
// CoordinationService::ReportRolledBack) and when it last heard from each task (a hang is lost
// from its last heartbeat, a crash from its session's end).
#include "absl/strings/str_cat.h"
#include "common/testing/fake_clock.h"
#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "prometheus/registry.h"
#include "runtime/coordination/rollback_ledger.h"
#include "runtime/coordination/service.h"
#include "runtime/coordination/service_test_util.h"

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
