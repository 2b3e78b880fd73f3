// Spares (spec.spares, ADR 0007): the pool's state machine, and the service handing a failed
// task to the spare that waited longest.
#include <optional>

#include "common/testing/fake_clock.h"
#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "prometheus/registry.h"
#include "runtime/coordination/service.h"
#include "runtime/coordination/service_test_util.h"
#include "runtime/coordination/spare_pool.h"

namespace phalanx::coord {
namespace {

using ::phalanx::coord::testing::RecordingSession;
using ::phalanx::coord::testing::Slot;
using ::phalanx::testing::IsOk;
using ::phalanx::testing::StatusIs;
using ::testing::HasSubstr;
using ::testing::SizeIs;

using Answer = absl::StatusOr<std::optional<SpareAssignment>>;

const absl::Time kSpareT0 = absl::FromUnixSeconds(1000);

TEST(SparePool, TheLongestWaitingSpareTakesOverAndAnAskAgainGetsTheSameAnswer) {
  SparePool pool({});
  Completions out;
  Slot<Answer> first, second, again;
  EXPECT_TRUE(
      pool.Await("spare-a", 0, kSpareT0, kSpareT0 + absl::Seconds(10), first.Callback(), out));
  EXPECT_TRUE(pool.Await("spare-b", 1, kSpareT0 + absl::Seconds(1), kSpareT0 + absl::Seconds(11),
                         second.Callback(), out));
  EXPECT_EQ(pool.TakeOver(3, 8, kSpareT0 + absl::Seconds(2), out), "spare-a");
  out.Run();
  ASSERT_TRUE(first.done());
  ASSERT_THAT(first.value(), IsOk());
  EXPECT_EQ(**first.value(), (SpareAssignment{3, 8}));
  EXPECT_FALSE(second.done());
  // Its answer was lost: asking again answers at once, with the same task.
  EXPECT_FALSE(pool.Await("spare-a", 0, kSpareT0 + absl::Seconds(3), kSpareT0 + absl::Seconds(13),
                          again.Callback(), out));
  out.Run();
  ASSERT_TRUE(again.done());
  EXPECT_EQ(**again.value(), (SpareAssignment{3, 8}));
  const std::vector<SpareInfo> infos = pool.Infos();
  ASSERT_THAT(infos, SizeIs(2));
  EXPECT_EQ(infos[0].pod, "spare-b");  // waiting first
  EXPECT_EQ(infos[0].task_id, -1);
  EXPECT_EQ(infos[1].pod, "spare-a");
  EXPECT_EQ(infos[1].task_id, 3);
  EXPECT_EQ(infos[1].incarnation, 8u);
}

TEST(SparePool, APollEndsAtItsDeadlineButTheSpareKeepsItsPlaceUntilItStopsPolling) {
  SparePool pool({});
  Completions out;
  Slot<Answer> older, newer, again;
  pool.Await("spare-a", 0, kSpareT0, kSpareT0 + absl::Seconds(10), older.Callback(), out);
  EXPECT_FALSE(
      pool.Await("spare-a", 0, kSpareT0, kSpareT0 + absl::Seconds(20), newer.Callback(), out));
  out.Run();
  ASSERT_TRUE(older.done());
  EXPECT_FALSE(older.value()->has_value());                      // "not yet": the newer poll stands
  EXPECT_FALSE(pool.Expire(kSpareT0 + absl::Seconds(20), out));  // a poll's end is no news
  out.Run();
  ASSERT_TRUE(newer.done());
  EXPECT_FALSE(newer.value()->has_value());
  EXPECT_EQ(pool.waiting_count(), 1u);  // between two polls it still waits...
  // ...and may be given a task then: its next poll is answered with it at once.
  EXPECT_EQ(pool.TakeOver(2, 3, kSpareT0 + absl::Seconds(21), out), "spare-a");
  pool.Await("spare-a", 0, kSpareT0 + absl::Seconds(22), kSpareT0 + absl::Seconds(32),
             again.Callback(), out);
  out.Run();
  ASSERT_TRUE(again.done());
  EXPECT_EQ(**again.value(), (SpareAssignment{2, 3}));
  // A spare that stops polling is forgotten after the grace.
  Slot<Answer> gone;
  pool.Await("spare-b", 0, kSpareT0, kSpareT0 + absl::Seconds(10), gone.Callback(), out);
  EXPECT_FALSE(pool.Expire(kSpareT0 + absl::Seconds(10), out));
  EXPECT_TRUE(pool.Expire(kSpareT0 + absl::Seconds(10) + SparePool::kRewaitGrace, out));
  EXPECT_EQ(pool.waiting_count(), 0u);
  EXPECT_EQ(pool.TakeOver(0, 1, kSpareT0, out), std::nullopt);  // nobody waits
}

TEST(SparePool, BoundsTheSparesThatWaitAndNamesATakeOverNobodyClaimedOnce) {
  SparePool pool({.max_waiting = 1, .max_assignments = 8});
  Completions out;
  Slot<Answer> a, b;
  pool.Await("spare-a", 0, kSpareT0, kSpareT0 + absl::Seconds(10), a.Callback(), out);
  pool.Await("spare-b", 1, kSpareT0, kSpareT0 + absl::Seconds(10), b.Callback(), out);
  out.Run();
  ASSERT_TRUE(b.done());
  EXPECT_THAT(b.value(), StatusIs(absl::StatusCode::kResourceExhausted));
  pool.TakeOver(2, 5, kSpareT0, out);
  pool.Registered(2, 4);  // an older incarnation: not this take-over
  EXPECT_THAT(pool.Unclaimed(kSpareT0 - absl::Seconds(1)), SizeIs(0));  // not yet due
  const std::vector<SpareInfo> lost = pool.Unclaimed(kSpareT0);
  ASSERT_THAT(lost, SizeIs(1));
  EXPECT_EQ(lost[0].pod, "spare-a");
  EXPECT_THAT(pool.Unclaimed(kSpareT0 + absl::Hours(1)), SizeIs(0));  // named once
}

class SpareServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    CoordinationService::Options options;
    options.job = "demo";
    options.num_tasks = 2;
    options.heartbeat_interval = absl::Milliseconds(500);
    options.heartbeat_timeout = absl::Seconds(2);
    auto service = CoordinationService::Create(options, clock_, metrics_);
    ASSERT_THAT(service, IsOk());
    service_ = *std::move(service);
    for (int i = 0; i < 2; ++i) Join(i, 0);
  }
  void Join(int id, base::Incarnation incarnation) {
    ASSERT_THAT(service_->Register({id, incarnation}), IsOk());
    sessions_[id] = std::make_unique<RecordingSession>();
    auto session = service_->OpenSession({id, incarnation}, sessions_[id]->outbox());
    ASSERT_THAT(session, IsOk());
    session_ids_[id] = *session;
  }

  phalanx::testing::FakeClock clock_;
  prometheus::Registry registry_;
  CoordinatorMetrics metrics_{registry_};
  std::unique_ptr<CoordinationService> service_;
  std::unique_ptr<RecordingSession> sessions_[2];
  uint64_t session_ids_[2] = {};
};

TEST_F(SpareServiceTest, ACrashedTaskIsTakenOverAtOnceAndTheSnapshotThatSaysSoNamesTheSpare) {
  Slot<Answer> spare;
  service_->AwaitAssignment(0, "job-spare-0", absl::Seconds(10), spare.Callback());
  const uint64_t waiting_version = service_->Snapshot().version;
  ASSERT_THAT(service_->Snapshot().spares, SizeIs(1));
  // The connection ended without a close: a death.
  service_->CloseSession(session_ids_[1], absl::UnavailableError("connection lost"));
  ASSERT_TRUE(spare.done());
  ASSERT_THAT(spare.value(), IsOk());
  EXPECT_EQ(**spare.value(), (SpareAssignment{1, 1}));
  const JobSnapshot after = service_->Snapshot();
  EXPECT_GT(after.version, waiting_version);
  EXPECT_EQ(after.tasks[1].state, TaskState::kFailed);
  ASSERT_THAT(after.spares, SizeIs(1));
  EXPECT_EQ(after.spares[0].pod, "job-spare-0");
  EXPECT_EQ(after.spares[0].task_id, 1);
  // The spare registers as the task's next incarnation like any replacement.
  Join(1, 1);
  EXPECT_EQ(service_->Snapshot().tasks[1].state, TaskState::kConnected);
}

TEST_F(SpareServiceTest, ATaskThatClosedItsOwnSessionOrLeftIsNotTakenOver) {
  Slot<Answer> spare;
  service_->AwaitAssignment(0, "job-spare-0", absl::Seconds(10), spare.Callback());
  // Its script may just have ended: the operator decides from the pod's exit.
  service_->CloseSession(session_ids_[1], absl::CancelledError("stream closed by the task"));
  EXPECT_EQ(service_->Snapshot().tasks[1].state, TaskState::kFailed);
  service_->Leave(session_ids_[0], "done");
  EXPECT_FALSE(spare.done());
  // The spare's wait is answered (cancelled) when the service stops: while `spare` still lives
  // (UBSan/ASan: the fixture's service outlived it and wrote into it).
  service_->Stop();
  EXPECT_TRUE(spare.done());
}

TEST_F(SpareServiceTest, HungAndReportedFailuresAreTakenOverInTurn) {
  Slot<Answer> a, b;
  service_->AwaitAssignment(0, "job-spare-a", absl::Seconds(30), a.Callback());
  service_->AwaitAssignment(1, "job-spare-b", absl::Seconds(30), b.Callback());
  ASSERT_THAT(service_->ReportError({0, 0}, "CUDA error"), IsOk());
  ASSERT_TRUE(a.done());
  EXPECT_EQ(**a.value(), (SpareAssignment{0, 1}));
  // Task 1 hangs: the heartbeat timeout fails it, and the second spare gets it.
  clock_.Advance(absl::Seconds(3));
  service_->Tick(clock_.Now());
  ASSERT_TRUE(b.done());
  EXPECT_EQ(**b.value(), (SpareAssignment{1, 1}));
}

TEST_F(SpareServiceTest, ATakeOverNobodyRegistersForIsHandedToTheNextSpare) {
  Slot<Answer> dead, alive;
  service_->AwaitAssignment(0, "job-spare-dead", absl::Seconds(30), dead.Callback());
  service_->CloseSession(session_ids_[1], absl::UnavailableError("connection lost"));
  ASSERT_TRUE(dead.done());  // answered, but its process is gone: it never registers
  service_->AwaitAssignment(1, "job-spare-alive", absl::Seconds(30), alive.Callback());
  for (int second = 1; second <= 3; ++second) {
    clock_.Advance(absl::Seconds(1));
    service_->Heartbeat(session_ids_[0], 0);  // task 0 stays healthy
    service_->Tick(clock_.Now());
    // Within the heartbeat timeout the task is still the first spare's.
    if (second < 2) EXPECT_FALSE(alive.done()) << second;
  }
  ASSERT_TRUE(alive.done());
  EXPECT_EQ(**alive.value(), (SpareAssignment{1, 2}));
  Join(1, 2);
  EXPECT_EQ(service_->Snapshot().tasks[1].incarnation, 2u);
}

TEST_F(SpareServiceTest, ATakeOverIsNotHandedOnOnceAReplacementRegistered) {
  Slot<Answer> dead, next;
  service_->AwaitAssignment(0, "job-spare-dead", absl::Seconds(30), dead.Callback());
  service_->CloseSession(session_ids_[1], absl::UnavailableError("connection lost"));
  ASSERT_TRUE(dead.done());  // given incarnation 1, never registers
  Join(1, 2);                // the operator's replacement registers, healthy
  service_->AwaitAssignment(1, "job-spare-next", absl::Seconds(30), next.Callback());
  for (int second = 1; second <= 3; ++second) {
    clock_.Advance(absl::Seconds(1));
    service_->Heartbeat(session_ids_[0], 0);
    service_->Heartbeat(session_ids_[1], 0);
    service_->Tick(clock_.Now());
  }
  EXPECT_FALSE(next.done());
  EXPECT_EQ(service_->Snapshot().tasks[1].incarnation, 2u);
  EXPECT_EQ(service_->Snapshot().tasks[1].state, TaskState::kConnected);
  service_->Stop();  // answers the spare's wait while `next` still lives
  EXPECT_TRUE(next.done());
}

TEST_F(SpareServiceTest, StoppingAnswersWaitingSparesUnavailable) {
  Slot<Answer> spare;
  service_->AwaitAssignment(0, "job-spare-0", absl::Seconds(10), spare.Callback());
  service_->Stop();
  ASSERT_TRUE(spare.done());
  EXPECT_THAT(spare.value(), StatusIs(absl::StatusCode::kUnavailable, HasSubstr("shutting down")));
}

}  // namespace
}  // namespace phalanx::coord
