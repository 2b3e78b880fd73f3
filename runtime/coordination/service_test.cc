#include "runtime/coordination/service.h"

#include <atomic>
#include <thread>

#include "absl/synchronization/notification.h"
#include "common/testing/fake_clock.h"
#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "prometheus/registry.h"
#include "runtime/coordination/service_test_util.h"

namespace phalanx::coord {
namespace {

using ::phalanx::coord::testing::RecordingSession;
using ::phalanx::coord::testing::Slot;
using ::phalanx::testing::IsOk;
using ::phalanx::testing::IsOkAndHolds;
using ::phalanx::testing::StatusIs;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::SizeIs;

class ServiceTest : public ::testing::Test {
 protected:
  void SetUp() override { Start(4); }

  void Start(int num_tasks) {
    CoordinationService::Options options;
    options.job = "demo";
    options.num_tasks = num_tasks;
    options.heartbeat_interval = absl::Milliseconds(500);
    options.heartbeat_timeout = absl::Seconds(2);
    options.barrier_default_timeout = absl::Seconds(30);
    options.coordinator_id = "c1";
    auto service = CoordinationService::Create(options, clock_, metrics_);
    ASSERT_THAT(service, IsOk());
    service_ = *std::move(service);
    sessions_.clear();
    for (int i = 0; i < num_tasks; ++i) sessions_.push_back(std::make_unique<RecordingSession>());
    session_ids_.assign(num_tasks, 0);
  }

  // Registers task `id` at `incarnation` and opens its session.
  void Join(int id, base::Incarnation incarnation = 0) {
    ASSERT_THAT(service_->Register({id, incarnation}), IsOk());
    sessions_[id] = std::make_unique<RecordingSession>();
    auto session = service_->OpenSession({id, incarnation}, sessions_[id]->outbox());
    ASSERT_THAT(session, IsOk());
    session_ids_[id] = *session;
  }
  void JoinAll() {
    for (int i = 0; i < static_cast<int>(sessions_.size()); ++i) Join(i);
  }
  TaskState StateOf(int id) { return service_->Snapshot().tasks[id].state; }
  void AdvanceAndTick(absl::Duration d) {
    clock_.Advance(d);
    service_->Tick(clock_.Now());
  }

  phalanx::testing::FakeClock clock_;
  prometheus::Registry registry_;
  CoordinatorMetrics metrics_{registry_};
  std::unique_ptr<CoordinationService> service_;
  std::vector<std::unique_ptr<RecordingSession>> sessions_;
  std::vector<uint64_t> session_ids_;
};

TEST(ServiceCreate, RejectsNonsensicalOptions) {
  phalanx::testing::FakeClock clock;
  prometheus::Registry registry;
  CoordinatorMetrics metrics(registry);
  CoordinationService::Options no_tasks;
  no_tasks.num_tasks = 0;
  EXPECT_THAT(CoordinationService::Create(no_tasks, clock, metrics),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("at least 1")));
  CoordinationService::Options slow_heartbeat;
  slow_heartbeat.heartbeat_interval = absl::Seconds(5);
  slow_heartbeat.heartbeat_timeout = absl::Seconds(2);
  EXPECT_THAT(CoordinationService::Create(slow_heartbeat, clock, metrics),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("heartbeat")));
}

TEST_F(ServiceTest, Register_ValidTask_BecomesConnected) {
  auto reg = service_->Register({2, 0});
  ASSERT_THAT(reg, IsOk());
  EXPECT_EQ(reg->num_tasks, 4);
  EXPECT_EQ(reg->coordinator_id, "c1");
  EXPECT_EQ(StateOf(2), TaskState::kConnected);
}

TEST_F(ServiceTest, Register_OutOfRangeTask_IsInvalidArgument) {
  EXPECT_THAT(service_->Register({4, 0}), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(service_->Register({-1, 0}), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST_F(ServiceTest, Register_SameIncarnationTwice_IsIdempotent) {
  Join(1);
  const uint64_t version = service_->Snapshot().version;
  EXPECT_THAT(service_->Register({1, 0}), IsOk());
  EXPECT_EQ(service_->Snapshot().version, version);
  EXPECT_FALSE(sessions_[1]->final_status().has_value()) << "session must survive a retry";
}

TEST_F(ServiceTest, Register_StaleIncarnation_IsAborted) {
  Join(1, 5);
  EXPECT_THAT(service_->Register({1, 4}), StatusIs(absl::StatusCode::kAborted, HasSubstr("stale")));
}

TEST_F(ServiceTest, Register_NewIncarnation_AbortsOldSessionAndPendingCalls) {
  JoinAll();
  Slot<absl::Status> barrier;
  service_->Barrier({1, 0}, "b", absl::ZeroDuration(), {}, barrier.Callback());
  Slot<absl::StatusOr<std::string>> get;
  service_->KvGet("k", TaskRef{1, 0}, absl::Seconds(10), get.Callback());
  ASSERT_FALSE(barrier.done());

  ASSERT_THAT(service_->Register({1, 1}), IsOk());

  ASSERT_TRUE(barrier.done());
  EXPECT_THAT(barrier.value(), StatusIs(absl::StatusCode::kAborted, HasSubstr("superseded")));
  ASSERT_TRUE(get.done());
  EXPECT_THAT(get.value(), StatusIs(absl::StatusCode::kAborted));
  ASSERT_TRUE(sessions_[1]->final_status().has_value());
  EXPECT_THAT(*sessions_[1]->final_status(), StatusIs(absl::StatusCode::kAborted));
  // Every peer is told the new incarnation.
  for (int peer : {0, 2, 3}) {
    auto changes = sessions_[peer]->EventsOf<TaskInfo>();
    ASSERT_THAT(changes, SizeIs(1)) << "peer " << peer;
    EXPECT_EQ(changes[0].task_id, 1);
    EXPECT_EQ(changes[0].incarnation, 1u);
    EXPECT_EQ(changes[0].state, TaskState::kConnected);
  }
  // The old incarnation's calls are refused from now on.
  EXPECT_THAT(service_->CancelBarrier({1, 0}, "x"), StatusIs(absl::StatusCode::kAborted));
}

TEST_F(ServiceTest, Session_Break_FailsTaskAndTellsEveryPeer) {
  JoinAll();
  service_->CloseSession(session_ids_[2], absl::UnavailableError("connection reset"));
  EXPECT_EQ(StateOf(2), TaskState::kFailed);
  for (int peer : {0, 1, 3}) {
    auto changes = sessions_[peer]->EventsOf<TaskInfo>();
    ASSERT_THAT(changes, SizeIs(1));
    EXPECT_EQ(changes[0].task_id, 2);
    EXPECT_EQ(changes[0].state, TaskState::kFailed);
    EXPECT_THAT(changes[0].reason, HasSubstr("connection reset"));
  }
  EXPECT_THAT(service_->Register({2, 0}),
              StatusIs(absl::StatusCode::kAborted, HasSubstr("new incarnation")));
  EXPECT_THAT(service_->Register({2, 1}), IsOk());
  EXPECT_EQ(StateOf(2), TaskState::kConnected);
}

TEST_F(ServiceTest, Session_ReplacedSessionClosing_DoesNotFailTask) {
  Join(0);
  const uint64_t first = session_ids_[0];
  auto second = std::make_unique<RecordingSession>();
  ASSERT_THAT(service_->OpenSession({0, 0}, second->outbox()), IsOk());
  EXPECT_THAT(*sessions_[0]->final_status(), StatusIs(absl::StatusCode::kAborted));
  service_->CloseSession(first, absl::CancelledError("gone"));
  EXPECT_EQ(StateOf(0), TaskState::kConnected);
}

TEST_F(ServiceTest, Heartbeat_Missing_FailsTaskAfterTimeout) {
  JoinAll();
  for (int i = 0; i < 3; ++i) {
    AdvanceAndTick(absl::Seconds(1));
    for (int t : {0, 1, 2}) service_->Heartbeat(session_ids_[t], 0);
  }
  EXPECT_EQ(StateOf(0), TaskState::kConnected);
  EXPECT_EQ(StateOf(3), TaskState::kFailed);
  EXPECT_THAT(service_->Snapshot().tasks[3].reason, HasSubstr("heartbeat timeout"));
  EXPECT_THAT(*sessions_[3]->final_status(), StatusIs(absl::StatusCode::kAborted));
  EXPECT_THAT(sessions_[0]->EventsOf<HeartbeatAck>(), SizeIs(3));
}

TEST_F(ServiceTest, Register_WithoutSession_FailsAfterTimeout) {
  ASSERT_THAT(service_->Register({0, 0}), IsOk());
  AdvanceAndTick(absl::Milliseconds(2100));
  EXPECT_EQ(StateOf(0), TaskState::kFailed);
  EXPECT_THAT(service_->Snapshot().tasks[0].reason, HasSubstr("no session"));
}

TEST_F(ServiceTest, Barrier_AllArrive_Passes) {
  JoinAll();
  std::vector<Slot<absl::Status>> slots(4);
  for (int i = 0; i < 4; ++i) {
    EXPECT_FALSE(i > 0 && slots[0].done());
    service_->Barrier({i, 0}, "step-1", absl::ZeroDuration(), {}, slots[i].Callback());
  }
  for (auto& s : slots) {
    ASSERT_TRUE(s.done());
    EXPECT_THAT(s.value(), IsOk());
  }
}

TEST_F(ServiceTest, Barrier_AParticipantsFailure_FailsItForEveryWaiterAtOnce) {
  JoinAll();
  std::vector<Slot<absl::Status>> slots(4);
  for (int i : {0, 1, 3}) service_->Barrier({i, 0}, "b", absl::Hours(1), {}, slots[i].Callback());
  Slot<absl::Status> pair;  // a barrier task 1 is not part of keeps waiting
  service_->Barrier({0, 0}, "pair", absl::Hours(1), {0, 2}, pair.Callback());
  service_->CloseSession(session_ids_[1], absl::UnavailableError("killed"));
  // No time passed: the survivors hear of it now, not at the deadline, and the error names it.
  for (int i : {0, 3}) {
    ASSERT_TRUE(slots[i].done()) << i;
    EXPECT_THAT(slots[i].value(),
                StatusIs(absl::StatusCode::kCancelled,
                         AllOf(HasSubstr("barrier 'b' failed"),
                               HasSubstr("peer task 1 (incarnation 0) failed: session broken"))));
  }
  EXPECT_THAT(slots[1].value(), StatusIs(absl::StatusCode::kAborted));
  EXPECT_FALSE(pair.done());
  // The id is single use: late arrivals, the restarted task's too, get the same failure.
  Join(1, 1);
  Slot<absl::Status> late, reborn;
  service_->Barrier({2, 0}, "b", absl::Hours(1), {}, late.Callback());
  service_->Barrier({1, 1}, "b", absl::Hours(1), {}, reborn.Callback());
  EXPECT_EQ(late.value(), slots[0].value());
  EXPECT_EQ(reborn.value(), slots[0].value());
  // The next epoch's barrier, with the new incarnation, passes.
  std::vector<Slot<absl::Status>> next(4);
  for (int i = 0; i < 4; ++i) {
    service_->Barrier({i, i == 1 ? 1u : 0u}, "b2", absl::Hours(1), {}, next[i].Callback());
  }
  for (int i = 0; i < 4; ++i) EXPECT_THAT(next[i].value(), IsOk()) << i;
  service_->Stop();  // answers "pair" while its slot is still alive
}

TEST_F(ServiceTest, Barrier_ArrivingWhileAParticipantIsFailed_FailsAtOnceForEveryone) {
  JoinAll();
  Slot<absl::Status> early;  // arrived before the failure, waits for task 2 only
  service_->Barrier({0, 0}, "c", absl::Hours(1), {0, 1, 3}, early.Callback());
  service_->CloseSession(session_ids_[2], absl::UnavailableError("killed"));
  EXPECT_FALSE(early.done());
  Slot<absl::Status> now, pending_one;
  service_->Barrier({0, 0}, "d", absl::Hours(1), {}, now.Callback());
  EXPECT_THAT(now.value(), StatusIs(absl::StatusCode::kCancelled,
                                    AllOf(HasSubstr("barrier 'd' failed"),
                                          HasSubstr("peer task 2 (incarnation 0) failed"))));
  // A subset without the failed task is not affected.
  service_->Barrier({1, 0}, "c", absl::Hours(1), {0, 1, 3}, pending_one.Callback());
  EXPECT_FALSE(early.done());
  // Once task 2 is back (a new incarnation), a barrier that includes it waits for it as usual.
  Join(2, 1);
  Slot<absl::Status> waits;
  service_->Barrier({0, 0}, "e", absl::Hours(1), {0, 2}, waits.Callback());
  EXPECT_FALSE(waits.done());
  service_->Stop();  // answers the waiting calls while their slots are still alive
}

// Issue 35 (found with a probe): two tasks pass b0 and close; both come back as incarnation 2,
// task 0 a second later. Task 1's b1 failed at once on task 0's previous incarnation, and the id
// stayed failed for task 0's own arrival: a whole-job restart tripped on the failure before it.
// A failure from before the arriving task registered is not news: the arrival waits for the
// failed peer's next incarnation.
TEST_F(ServiceTest, Barrier_AFailureFromBeforeTheCallerRegistered_WaitsForThePeersNextIncarnation) {
  Join(0, 0);
  Join(1, 0);
  Slot<absl::Status> a0, b0;
  service_->Barrier({0, 0}, "b0", absl::Hours(1), {0, 1}, a0.Callback());
  service_->Barrier({1, 0}, "b0", absl::Hours(1), {0, 1}, b0.Callback());
  ASSERT_THAT(a0.value(), IsOk());
  ASSERT_THAT(b0.value(), IsOk());
  for (int t : {0, 1}) {
    service_->CloseSession(session_ids_[t], absl::UnavailableError("stream closed by the task"));
  }
  Join(1, 2);
  Slot<absl::Status> task1;
  service_->Barrier({1, 2}, "b1", absl::Hours(1), {0, 1}, task1.Callback());
  clock_.Advance(absl::Seconds(1));
  EXPECT_FALSE(task1.done()) << task1.value();
  Join(0, 2);
  Slot<absl::Status> task0;
  service_->Barrier({0, 2}, "b1", absl::Hours(1), {0, 1}, task0.Callback());
  EXPECT_THAT(task0.value(), IsOk());
  EXPECT_THAT(task1.value(), IsOk());
}

// The other side of the rule: a survivor that registered before its peer failed still fails at
// once (it has not seen the failure), and so does a waiter when a peer's new incarnation fails.
TEST_F(ServiceTest, Barrier_AFailureAfterTheCallerRegistered_IsNewsAndFailsAtOnce) {
  Join(0, 0);
  Join(1, 0);
  service_->CloseSession(session_ids_[0], absl::UnavailableError("killed"));
  Slot<absl::Status> survivor;
  service_->Barrier({1, 0}, "b1", absl::Hours(1), {0, 1}, survivor.Callback());
  EXPECT_THAT(survivor.value(), StatusIs(absl::StatusCode::kCancelled,
                                         HasSubstr("peer task 0 (incarnation 0) failed")));

  Join(1, 1);  // registers after task 0's failure: waits for task 0's next incarnation
  Slot<absl::Status> waiting;
  service_->Barrier({1, 1}, "b2", absl::Hours(1), {0, 1}, waiting.Callback());
  EXPECT_FALSE(waiting.done());
  Join(0, 1);
  service_->CloseSession(session_ids_[0], absl::UnavailableError("killed again"));
  EXPECT_THAT(waiting.value(), StatusIs(absl::StatusCode::kCancelled,
                                        HasSubstr("peer task 0 (incarnation 1) failed")));
}

// Issue 35 (8): a task that says it is leaving departs; it does not fail. Its session ends, its
// own wait ends Cancelled, its peers hear SHUTDOWN "left: ..." and nothing of theirs fails: a
// barrier including it waits for its next incarnation, which passes it.
TEST_F(ServiceTest, Leave_IsADepartureNotAFailure) {
  Join(0, 0);
  Join(1, 0);
  Slot<absl::Status> survivor, own;
  service_->Barrier({0, 0}, "b", absl::Hours(1), {0, 1}, survivor.Callback());
  service_->Barrier({1, 0}, "other", absl::Hours(1), {1, 2}, own.Callback());
  service_->Leave(session_ids_[1], "rescheduled by the user");
  EXPECT_EQ(StateOf(1), TaskState::kShutdown);
  EXPECT_EQ(service_->Snapshot().tasks[1].reason, "left: rescheduled by the user");
  EXPECT_THAT(own.value(), StatusIs(absl::StatusCode::kCancelled, HasSubstr("task 1 left")));
  EXPECT_TRUE(sessions_[1]->final_status().has_value()) << "its session is ended";
  // The transport then sees the stream end: not a failure any more.
  service_->CloseSession(session_ids_[1], absl::UnavailableError("stream closed by the task"));
  EXPECT_EQ(StateOf(1), TaskState::kShutdown);
  EXPECT_FALSE(survivor.done()) << "a departure fails no peer's wait";
  bool heard = false;
  for (const TaskInfo& info : sessions_[0]->EventsOf<TaskInfo>()) {
    heard |= info.task_id == 1 && info.state == TaskState::kShutdown;
  }
  EXPECT_TRUE(heard) << "peers hear of the departure";
  Slot<absl::Status> later;
  service_->Barrier({0, 0}, "c", absl::Hours(1), {0, 1}, later.Callback());
  EXPECT_FALSE(later.done()) << "no fail fast for a task that left";

  Join(1, 1);
  Slot<absl::Status> back;
  service_->Barrier({1, 1}, "b", absl::Hours(1), {0, 1}, back.Callback());
  EXPECT_THAT(back.value(), IsOk());
  EXPECT_THAT(survivor.value(), IsOk());
  service_->Stop();  // answers "c" while its slot is alive
}

TEST_F(ServiceTest, Leave_OfAnUnknownOrEndedSessionChangesNothing) {
  Join(0, 0);
  service_->Leave(12345, "");
  service_->CloseSession(session_ids_[0], absl::UnavailableError("killed"));
  service_->Leave(session_ids_[0], "too late");
  EXPECT_EQ(StateOf(0), TaskState::kFailed);
}

TEST_F(ServiceTest, Barrier_ShutdownBarrierWaitsThroughAFailure_ForTheRestartedTask) {
  Join(0, 0);
  Join(1, 0);
  Slot<absl::Status> first;
  service_->Shutdown({0, 0}, absl::Hours(1), first.Callback());
  service_->CloseSession(session_ids_[1], absl::UnavailableError("killed"));
  EXPECT_FALSE(first.done());
  service_->Stop();  // answers it while its slot is still alive
}

TEST_F(ServiceTest, Barrier_Timeout_NamesTasksThatNeverArrived) {
  JoinAll();
  Slot<absl::Status> a, b;
  service_->Barrier({0, 0}, "b", absl::Seconds(5), {}, a.Callback());
  service_->Barrier({1, 0}, "b", absl::Seconds(5), {}, b.Callback());
  for (int second = 0; second < 4; ++second) {
    for (int t : {0, 1, 2, 3}) service_->Heartbeat(session_ids_[t], 0);
    AdvanceAndTick(absl::Seconds(1));
  }
  EXPECT_FALSE(a.done());
  for (int t : {0, 1, 2, 3}) service_->Heartbeat(session_ids_[t], 0);
  AdvanceAndTick(absl::Seconds(1));
  ASSERT_TRUE(a.done());
  EXPECT_THAT(a.value(),
              StatusIs(absl::StatusCode::kDeadlineExceeded, HasSubstr("never arrived: 2, 3")));
  EXPECT_EQ(a.value(), b.value());
}

TEST_F(ServiceTest, Barrier_Subset_PassesWithoutOthers) {
  JoinAll();
  Slot<absl::Status> a, b;
  service_->Barrier({0, 0}, "pair", absl::ZeroDuration(), {2, 0}, a.Callback());
  service_->Barrier({2, 0}, "pair", absl::ZeroDuration(), {0, 2}, b.Callback());
  EXPECT_THAT(a.value(), IsOk());
  EXPECT_THAT(b.value(), IsOk());
}

TEST_F(ServiceTest, Barrier_BadRequests_AreInvalidArgument) {
  JoinAll();
  struct Case {
    std::string name;
    std::string id;
    absl::Duration timeout;
    std::vector<int> tasks;
  };
  for (const Case& c : std::vector<Case>{{"empty id", "", absl::ZeroDuration(), {}},
                                         {"negative timeout", "x", absl::Seconds(-1), {}},
                                         {"caller missing", "x", absl::ZeroDuration(), {1, 2}},
                                         {"duplicate", "x", absl::ZeroDuration(), {0, 0}},
                                         {"out of range", "x", absl::ZeroDuration(), {0, 9}}}) {
    SCOPED_TRACE(c.name);
    Slot<absl::Status> slot;
    service_->Barrier({0, 0}, c.id, c.timeout, c.tasks, slot.Callback());
    ASSERT_TRUE(slot.done());
    EXPECT_THAT(slot.value(), StatusIs(absl::StatusCode::kInvalidArgument));
  }
}

TEST_F(ServiceTest, Barrier_Cancel_FailsEveryWaiter) {
  JoinAll();
  Slot<absl::Status> a, b;
  service_->Barrier({0, 0}, "b", absl::ZeroDuration(), {}, a.Callback());
  service_->Barrier({1, 0}, "b", absl::ZeroDuration(), {}, b.Callback());
  EXPECT_THAT(service_->CancelBarrier({2, 0}, "b"), IsOk());
  EXPECT_THAT(a.value(), StatusIs(absl::StatusCode::kCancelled, HasSubstr("task 2")));
  EXPECT_THAT(b.value(), StatusIs(absl::StatusCode::kCancelled));
  EXPECT_THAT(service_->CancelBarrier({2, 0}, "b"), StatusIs(absl::StatusCode::kNotFound));
}

TEST_F(ServiceTest, Barrier_LateArrivalAtPassedBarrier_ReturnsOkAtOnce) {
  Start(2);
  JoinAll();
  Slot<absl::Status> a, b, late;
  service_->Barrier({0, 0}, "b", absl::ZeroDuration(), {}, a.Callback());
  service_->Barrier({1, 0}, "b", absl::ZeroDuration(), {}, b.Callback());
  service_->Barrier({1, 0}, "b", absl::ZeroDuration(), {}, late.Callback());
  ASSERT_TRUE(late.done());
  EXPECT_THAT(late.value(), IsOk());
}

TEST_F(ServiceTest, Kv_BlockingGet_WakesOnInsert_AndTimesOut) {
  Slot<absl::StatusOr<std::string>> waiting, expiring;
  service_->KvGet("nccl/id", std::nullopt, absl::Seconds(10), waiting.Callback());
  service_->KvGet("never", std::nullopt, absl::Seconds(1), expiring.Callback());
  EXPECT_FALSE(waiting.done());
  EXPECT_THAT(service_->KvInsert("nccl/id", "abc", false), IsOk());
  ASSERT_TRUE(waiting.done());
  EXPECT_EQ(*waiting.value(), "abc");
  AdvanceAndTick(absl::Seconds(1));
  EXPECT_THAT(expiring.value(), StatusIs(absl::StatusCode::kDeadlineExceeded));
}

TEST_F(ServiceTest, Kv_BlockingGetOfATask_FailsAtOnceWhenAPeerFails) {
  JoinAll();
  Slot<absl::StatusOr<std::string>> task_get, tool_get;
  service_->KvGet("addr/3", TaskRef{0, 0}, absl::Hours(1), task_get.Callback());
  service_->KvGet("addr/3", std::nullopt, absl::Hours(1), tool_get.Callback());
  ASSERT_THAT(service_->ReportError({3, 0}, "bad input"), IsOk());
  ASSERT_TRUE(task_get.done());
  EXPECT_THAT(task_get.value(),
              StatusIs(absl::StatusCode::kCancelled,
                       AllOf(HasSubstr("get of key 'addr/3' failed"),
                             HasSubstr("peer task 3 (incarnation 0) failed: reported error"))));
  EXPECT_FALSE(tool_get.done());  // not a task: nothing to recover
  // A get started after the failure waits (any task, the restarted one too, may set the key).
  Slot<absl::StatusOr<std::string>> after;
  service_->KvGet("addr/3", TaskRef{0, 0}, absl::Hours(1), after.Callback());
  EXPECT_FALSE(after.done());
  Join(3, 1);
  ASSERT_THAT(service_->KvInsert("addr/3", "x", false), IsOk());
  EXPECT_THAT(after.value(), IsOkAndHolds("x"));
  EXPECT_THAT(tool_get.value(), IsOkAndHolds("x"));
}

TEST_F(ServiceTest, Kv_InsertOverwriteDirDelete) {
  EXPECT_THAT(service_->KvInsert("a/x", "1", false), IsOk());
  EXPECT_THAT(service_->KvInsert("a/x", "2", false), StatusIs(absl::StatusCode::kAlreadyExists));
  EXPECT_THAT(service_->KvInsert("a/x", "2", true), IsOk());
  EXPECT_THAT(service_->KvInsert("a/b/y", "3", false), IsOk());
  EXPECT_THAT(service_->KvInsert("ab", "4", false), IsOk());
  EXPECT_EQ(*service_->KvTryGet("a/x"), "2");
  EXPECT_THAT(service_->KvTryGet("a/z"), StatusIs(absl::StatusCode::kNotFound));
  auto dir = service_->KvGetDir("a");
  ASSERT_THAT(dir, IsOk());
  EXPECT_THAT(dir->entries, ElementsAre(std::pair<std::string, std::string>{"a/b/y", "3"},
                                        std::pair<std::string, std::string>{"a/x", "2"}));
  EXPECT_EQ(*service_->KvDelete("a"), 2);
  EXPECT_EQ(*service_->KvTryGet("ab"), "4");
  EXPECT_EQ(*service_->KvDelete("missing"), 0);
}

// Store.add and Store.compare_set of torch.distributed sit on these: a counter kept as decimal
// text (a plain get reads it), and a compare-and-set that can also mean "only if absent".
TEST_F(ServiceTest, Kv_AddCountsInDecimal_WakesWaiters_AndRefusesWhatIsNotACounter) {
  Slot<absl::StatusOr<std::string>> waiting;
  service_->KvGet("rdzv/arrived", std::nullopt, absl::Seconds(10), waiting.Callback());
  EXPECT_THAT(service_->KvAdd("rdzv/arrived", 1), IsOkAndHolds(1));  // absent counts as 0
  ASSERT_TRUE(waiting.done());
  EXPECT_EQ(*waiting.value(), "1");
  EXPECT_THAT(service_->KvAdd("rdzv/arrived", 41), IsOkAndHolds(42));
  EXPECT_THAT(service_->KvAdd("rdzv/arrived", -50), IsOkAndHolds(-8));
  EXPECT_THAT(service_->KvAdd("rdzv/arrived", 0), IsOkAndHolds(-8));
  EXPECT_EQ(*service_->KvTryGet("rdzv/arrived"), "-8");
  ASSERT_THAT(service_->KvInsert("name", "worker", false), IsOk());
  EXPECT_THAT(service_->KvAdd("name", 1),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("not a decimal integer")));
  ASSERT_THAT(service_->KvInsert("big", "9223372036854775807", false), IsOk());
  EXPECT_THAT(service_->KvAdd("big", 1), StatusIs(absl::StatusCode::kOutOfRange));
  EXPECT_EQ(*service_->KvTryGet("big"), "9223372036854775807");  // unchanged
  EXPECT_THAT(service_->KvAdd("bad key", 1), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST_F(ServiceTest, Kv_CompareAndSet_SwapsOnlyOnAMatch_AndCanMeanOnlyIfAbsent) {
  // Absent and expected absent: set.
  auto set = service_->KvCompareAndSet("leader", std::nullopt, "task-0");
  ASSERT_THAT(set, IsOk());
  EXPECT_TRUE(set->swapped);
  EXPECT_EQ(set->value, "task-0");
  // Present, expected absent: kept, and the caller learns the winner.
  auto lost = service_->KvCompareAndSet("leader", std::nullopt, "task-1");
  ASSERT_THAT(lost, IsOk());
  EXPECT_FALSE(lost->swapped);
  EXPECT_EQ(lost->value, "task-0");
  // A match swaps; a mismatch keeps.
  auto swapped = service_->KvCompareAndSet("leader", std::string("task-0"), "task-2");
  ASSERT_THAT(swapped, IsOk());
  EXPECT_TRUE(swapped->swapped);
  EXPECT_EQ(*service_->KvTryGet("leader"), "task-2");
  auto kept = service_->KvCompareAndSet("leader", std::string("task-0"), "task-3");
  ASSERT_THAT(kept, IsOk());
  EXPECT_FALSE(kept->swapped);
  EXPECT_EQ(kept->value, "task-2");
  // Absent but a value expected: nothing stored, and absent said.
  auto none = service_->KvCompareAndSet("nobody", std::string(""), "x");
  ASSERT_THAT(none, IsOk());
  EXPECT_FALSE(none->swapped);
  EXPECT_EQ(none->value, std::nullopt);
  EXPECT_THAT(service_->KvTryGet("nobody"), StatusIs(absl::StatusCode::kNotFound));
  // An empty value is a value, not "absent".
  ASSERT_THAT(service_->KvInsert("empty", "", false), IsOk());
  EXPECT_TRUE(service_->KvCompareAndSet("empty", std::string(""), "full")->swapped);
  // The store's limits hold for the value it would store.
  EXPECT_THAT(service_->KvCompareAndSet("big", std::nullopt, std::string((1 << 20) + 1, 'x')),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("limit")));
}

TEST_F(ServiceTest, Kv_BadKeysAndOversizedValues_AreInvalidArgument) {
  for (std::string key :
       {std::string(""), std::string("/a"), std::string("a/"), std::string("a//b"),
        std::string("sp ace"), std::string(600, 'k'), std::string("nul\0x", 5)}) {
    SCOPED_TRACE(key);
    EXPECT_THAT(service_->KvInsert(key, "v", true), StatusIs(absl::StatusCode::kInvalidArgument));
  }
  EXPECT_THAT(service_->KvInsert("big", std::string((1 << 20) + 1, 'x'), true),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("limit")));
  EXPECT_THAT(service_->KvInsert("max", std::string(1 << 20, 'x'), true), IsOk());
}

TEST_F(ServiceTest, WatchJobState_WaitsForChange_OrTimesOutUnchanged) {
  const uint64_t v0 = service_->Snapshot().version;
  Slot<JobSnapshot> immediate, on_change, on_timeout;
  service_->WatchJobState(0, absl::Seconds(5), immediate.Callback());
  EXPECT_TRUE(immediate.done());
  service_->WatchJobState(v0, absl::Seconds(5), on_change.Callback());
  EXPECT_FALSE(on_change.done());
  Join(0);
  ASSERT_TRUE(on_change.done());
  EXPECT_GT(on_change.value().version, v0);
  EXPECT_EQ(on_change.value().tasks[0].state, TaskState::kConnected);
  const uint64_t v1 = on_change.value().version;
  service_->WatchJobState(v1, absl::Seconds(1), on_timeout.Callback());
  service_->Heartbeat(session_ids_[0], 0);
  AdvanceAndTick(absl::Seconds(1));
  ASSERT_TRUE(on_timeout.done());
  EXPECT_EQ(on_timeout.value().version, v1);
}

TEST_F(ServiceTest, GetAliveTasks_EveryCallerGetsTheSameAnswer_WithoutTheDead) {
  JoinAll();
  std::vector<Slot<absl::StatusOr<std::vector<TaskRef>>>> slots(4);
  service_->GetAliveTasks({0, 0}, {}, absl::ZeroDuration(), slots[0].Callback());
  service_->GetAliveTasks({1, 0}, {}, absl::ZeroDuration(), slots[1].Callback());
  service_->GetAliveTasks({3, 0}, {}, absl::ZeroDuration(), slots[3].Callback());
  EXPECT_FALSE(slots[0].done());
  service_->CloseSession(session_ids_[2], absl::UnavailableError("killed"));
  for (int i : {0, 1, 3}) {
    ASSERT_TRUE(slots[i].done()) << i;
    ASSERT_THAT(slots[i].value(), IsOk());
    EXPECT_EQ(*slots[i].value(), (std::vector<TaskRef>{{0, 0}, {1, 0}, {3, 0}}));
  }
}

TEST_F(ServiceTest, ReportError_FailsTaskAndTellsPeers) {
  JoinAll();
  EXPECT_THAT(service_->ReportError({1, 0}, "CUDA error: an illegal memory access"), IsOk());
  EXPECT_EQ(StateOf(1), TaskState::kFailed);
  auto errors = sessions_[0]->EventsOf<ErrorReport>();
  ASSERT_THAT(errors, SizeIs(1));
  EXPECT_EQ(errors[0].task.task_id, 1);
  EXPECT_THAT(errors[0].message, HasSubstr("illegal memory"));
}

TEST_F(ServiceTest, Shutdown_AllArrive_TasksShutDownAndLaterDisconnectsAreNotFailures) {
  Start(2);
  JoinAll();
  Slot<absl::Status> a, b;
  service_->Shutdown({0, 0}, absl::ZeroDuration(), a.Callback());
  EXPECT_FALSE(service_->AllTasksShutDown());
  service_->Shutdown({1, 0}, absl::ZeroDuration(), b.Callback());
  EXPECT_THAT(a.value(), IsOk());
  EXPECT_THAT(b.value(), IsOk());
  EXPECT_TRUE(service_->AllTasksShutDown());
  service_->CloseSession(session_ids_[0], absl::CancelledError("exit"));
  EXPECT_EQ(StateOf(0), TaskState::kShutdown);
}

TEST_F(ServiceTest, Shutdown_AfterATimeout_CanBeTriedAgain) {
  Start(2);
  JoinAll();
  Slot<absl::Status> first;
  service_->Shutdown({0, 0}, absl::Seconds(1), first.Callback());
  service_->Heartbeat(session_ids_[0], 0);
  service_->Heartbeat(session_ids_[1], 0);
  AdvanceAndTick(absl::Seconds(1));
  EXPECT_THAT(first.value(), StatusIs(absl::StatusCode::kDeadlineExceeded, HasSubstr("1")));
  Slot<absl::Status> a, b;
  service_->Shutdown({0, 0}, absl::Seconds(5), a.Callback());
  service_->Shutdown({1, 0}, absl::Seconds(5), b.Callback());
  EXPECT_THAT(a.value(), IsOk());
  EXPECT_THAT(b.value(), IsOk());
}

TEST_F(ServiceTest, CancelBarrier_ReservedShutdownId_IsInvalidArgument) {
  JoinAll();
  EXPECT_THAT(service_->CancelBarrier({0, 0}, " shutdown"),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST_F(ServiceTest, Stop_FailsEveryPendingCallWithUnavailable_NeverCancelled) {
  // A stopping coordinator (SIGTERM, pod eviction) is an outage its clients retry through;
  // Cancelled made workers give up (issue 13).
  JoinAll();
  Slot<absl::Status> barrier;
  Slot<absl::StatusOr<std::string>> get;
  Slot<absl::StatusOr<std::vector<TaskRef>>> alive;
  Slot<absl::StatusOr<int64_t>> sync;
  service_->Barrier({0, 0}, "b", absl::ZeroDuration(), {}, barrier.Callback());
  service_->KvGet("never", TaskRef{1, 0}, absl::Seconds(10), get.Callback());
  service_->GetAliveTasks({2, 0}, {}, absl::ZeroDuration(), alive.Callback());
  auto round = service_->NotifyPreemption({"r", clock_.Now() + absl::Seconds(30), {}});
  ASSERT_THAT(round, IsOk());
  service_->ReportSyncStep({3, 0}, round->first.round, 5, sync.Callback());
  service_->Stop();
  EXPECT_THAT(barrier.value(), StatusIs(absl::StatusCode::kUnavailable, HasSubstr("retry")));
  EXPECT_THAT(get.value(), StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_THAT(alive.value(), StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_THAT(sync.value(), StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_THAT(*sessions_[1]->final_status(), StatusIs(absl::StatusCode::kUnavailable));
  Slot<absl::Status> late;
  service_->Barrier({0, 0}, "later", absl::ZeroDuration(), {}, late.Callback());
  EXPECT_THAT(late.value(), StatusIs(absl::StatusCode::kUnavailable));
  service_->Stop();  // idempotent
}

TEST_F(ServiceTest, ConcurrentCallers_AllComplete) {
  // Exercised under TSan: many threads arriving at barriers and using the store at once.
  Start(8);
  JoinAll();
  std::vector<std::thread> threads;
  std::atomic<int> passed{0};
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < 50; ++round) {
        absl::Notification done;
        service_->Barrier({t, 0}, "r" + std::to_string(round), absl::ZeroDuration(), {},
                          [&](absl::Status s) {
                            if (s.ok()) ++passed;
                            done.Notify();
                          });
        (void)service_->KvInsert("k/" + std::to_string(t), "v", true);
        service_->Heartbeat(session_ids_[t], 0);
        done.WaitForNotification();
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(passed.load(), 8 * 50);
}

}  // namespace
}  // namespace phalanx::coord
