#include "runtime/coordination/preemption_sync.h"

#include "common/testing/fake_clock.h"
#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "prometheus/registry.h"
#include "runtime/coordination/service.h"
#include "runtime/coordination/service_test_util.h"

namespace phalanx::coord {
namespace {

using ::phalanx::coord::testing::RecordingSession;
using ::phalanx::coord::testing::Slot;
using ::phalanx::testing::IsOk;
using ::phalanx::testing::StatusIs;
using ::testing::HasSubstr;
using ::testing::SizeIs;

class PreemptionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    CoordinationService::Options options;
    options.num_tasks = 3;
    options.heartbeat_timeout = absl::Seconds(100);
    service_ = *CoordinationService::Create(options, clock_, metrics_);
    for (int i = 0; i < 3; ++i) {
      sessions_.push_back(std::make_unique<RecordingSession>());
      ASSERT_THAT(service_->Register({i, 0}), IsOk());
      auto id = service_->OpenSession({i, 0}, sessions_[i]->outbox());
      ASSERT_THAT(id, IsOk());
      session_ids_.push_back(*id);
    }
  }
  phalanx::testing::FakeClock clock_;
  prometheus::Registry registry_;
  CoordinatorMetrics metrics_{registry_};
  std::unique_ptr<CoordinationService> service_;
  std::vector<std::unique_ptr<RecordingSession>> sessions_;
  std::vector<uint64_t> session_ids_;
};

TEST_F(PreemptionTest, Notice_TellsEverySession_AndSyncStepIsTheLargestReported) {
  auto round =
      service_->NotifyPreemption({"node n1 preempted", clock_.Now() + absl::Seconds(30), {1}});
  ASSERT_THAT(round, IsOk());
  EXPECT_FALSE(round->second);
  for (auto& s : sessions_) {
    auto rounds = s->EventsOf<PreemptionRound>();
    ASSERT_THAT(rounds, SizeIs(1));
    EXPECT_EQ(rounds[0].round, round->first.round);
    EXPECT_EQ(rounds[0].affected_tasks, std::vector<int>{1});
  }
  std::vector<Slot<absl::StatusOr<int64_t>>> slots(3);
  const int64_t steps[] = {41, 42, 41};
  for (int i = 0; i < 3; ++i) {
    EXPECT_FALSE(slots[0].done());
    service_->ReportSyncStep({i, 0}, round->first.round, steps[i], slots[i].Callback());
  }
  for (auto& s : slots) {
    ASSERT_TRUE(s.done());
    EXPECT_EQ(*s.value(), 42);
  }
}

TEST_F(PreemptionTest, SecondNotice_JoinsOpenRound_WithEarlierDeadline) {
  auto first = service_->NotifyPreemption({"a", clock_.Now() + absl::Seconds(60), {0}});
  auto second = service_->NotifyPreemption({"b", clock_.Now() + absl::Seconds(20), {2}});
  ASSERT_THAT(second, IsOk());
  EXPECT_TRUE(second->second);
  EXPECT_EQ(second->first.round, first->first.round);
  EXPECT_EQ(second->first.deadline, clock_.Now() + absl::Seconds(20));
  EXPECT_EQ(second->first.affected_tasks, (std::vector<int>{0, 2}));
}

TEST_F(PreemptionTest, DeadTask_IsNotWaitedFor) {
  auto round = service_->NotifyPreemption({"r", clock_.Now() + absl::Seconds(30), {}});
  Slot<absl::StatusOr<int64_t>> a, b;
  service_->ReportSyncStep({0, 0}, round->first.round, 7, a.Callback());
  service_->ReportSyncStep({1, 0}, round->first.round, 8, b.Callback());
  EXPECT_FALSE(a.done());
  service_->CloseSession(session_ids_[2], absl::UnavailableError("killed"));
  ASSERT_TRUE(a.done());
  EXPECT_EQ(*a.value(), 8);
  EXPECT_EQ(*b.value(), 8);
}

TEST_F(PreemptionTest, Deadline_FailsWaitersNamingTasksThatNeverReported) {
  auto round = service_->NotifyPreemption({"r", clock_.Now() + absl::Seconds(5), {}});
  Slot<absl::StatusOr<int64_t>> a;
  service_->ReportSyncStep({0, 0}, round->first.round, 3, a.Callback());
  clock_.Advance(absl::Seconds(5));
  service_->Tick(clock_.Now());
  ASSERT_TRUE(a.done());
  EXPECT_THAT(a.value(), StatusIs(absl::StatusCode::kDeadlineExceeded, HasSubstr("1, 2")));
  // The round is over: a new notice opens a new one.
  auto next = service_->NotifyPreemption({"r2", clock_.Now() + absl::Seconds(5), {}});
  EXPECT_FALSE(next->second);
  EXPECT_GT(next->first.round, round->first.round);
}

TEST_F(PreemptionTest, NoticeAfterAgreement_OpensANewRound) {
  auto first = service_->NotifyPreemption({"a", clock_.Now() + absl::Seconds(60), {}});
  std::vector<Slot<absl::StatusOr<int64_t>>> slots(3);
  for (int i = 0; i < 3; ++i) {
    service_->ReportSyncStep({i, 0}, first->first.round, 10, slots[i].Callback());
  }
  ASSERT_EQ(*slots[0].value(), 10);
  auto second = service_->NotifyPreemption({"b", clock_.Now() + absl::Seconds(60), {}});
  ASSERT_THAT(second, IsOk());
  EXPECT_FALSE(second->second);
  EXPECT_GT(second->first.round, first->first.round);
}

TEST_F(PreemptionTest, NoticeWithoutDeadline_GetsAFiniteWindow) {
  auto round = service_->NotifyPreemption({"no deadline", absl::InfiniteFuture(), {}});
  ASSERT_THAT(round, IsOk());
  EXPECT_LT(round->first.deadline, clock_.Now() + absl::Hours(1));
}

TEST_F(PreemptionTest, ReportForUnknownRound_IsFailedPrecondition) {
  Slot<absl::StatusOr<int64_t>> a;
  service_->ReportSyncStep({0, 0}, 99, 3, a.Callback());
  EXPECT_THAT(a.value(), StatusIs(absl::StatusCode::kFailedPrecondition));
}

TEST_F(PreemptionTest, TaskJoiningMidRound_HearsOfIt) {
  auto round = service_->NotifyPreemption({"r", clock_.Now() + absl::Seconds(30), {}});
  service_->CloseSession(session_ids_[1], absl::UnavailableError("killed"));
  ASSERT_THAT(service_->Register({1, 1}), IsOk());
  RecordingSession reborn;
  ASSERT_THAT(service_->OpenSession({1, 1}, reborn.outbox()), IsOk());
  EXPECT_THAT(reborn.EventsOf<PreemptionRound>(), SizeIs(1));
}

TEST_F(PreemptionTest, NamedTaskReplacedMidRound_IsNoLongerNamed) {
  // Task 1's node is going away; it checkpoints, leaves, and its successor registers elsewhere.
  auto round = service_->NotifyPreemption({"r", clock_.Now() + absl::Seconds(30), {1, 2}});
  ASSERT_THAT(round, IsOk());
  service_->CloseSession(session_ids_[1], absl::UnavailableError("left for preemption"));
  ASSERT_THAT(service_->Register({1, 1}), IsOk());
  RecordingSession reborn;
  ASSERT_THAT(service_->OpenSession({1, 1}, reborn.outbox()), IsOk());
  auto rounds = reborn.EventsOf<PreemptionRound>();
  ASSERT_THAT(rounds, SizeIs(1));
  EXPECT_EQ(rounds[0].round, round->first.round);
  EXPECT_EQ(rounds[0].affected_tasks, std::vector<int>{2});  // the successor stays
}

}  // namespace
}  // namespace phalanx::coord
