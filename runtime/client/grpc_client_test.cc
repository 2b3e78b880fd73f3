// Real gRPC on 127.0.0.1 (port 0): the client against an in-process coordination server.
#include <grpcpp/grpcpp.h>

#include <atomic>
#include <cstdlib>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/base/periodic_runner.h"
#include "common/testing/eventually.h"
#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "prometheus/registry.h"
#include "runtime/client/coordination_client_impl.h"
#include "runtime/client/test_coordinator.h"
#include "runtime/coordination/service.h"
#include "runtime/coordination/status_codec.h"
#include "runtime/coordination/token_auth.h"
#include "runtime/proto/coordination.grpc.pb.h"

namespace phalanx::client {
namespace {

using ::phalanx::testing::Eventually;
using ::phalanx::testing::IsOk;
using ::phalanx::testing::IsOkAndHolds;
using ::phalanx::testing::StatusIs;
using ::testing::HasSubstr;

using ::phalanx::client::testing::Coordinator;
using ::phalanx::client::testing::kToken;

ClientConfig ConfigFor(int port, int task, int num_tasks, base::Incarnation incarnation = 0,
                       std::string token = kToken) {
  ClientConfig config;
  config.coordinator = "127.0.0.1:" + std::to_string(port);
  config.job = "test";
  config.task_id = task;
  config.num_tasks = num_tasks;
  config.incarnation = incarnation;
  config.token = std::move(token);
  // CTest runs this suite twice: as is (the session on the wire) and with
  // PHALANX_SESSION_TRANSPORT=grpc (the Session RPC), so both transports pass the same tests.
  if (const char* transport = std::getenv("PHALANX_SESSION_TRANSPORT");
      transport != nullptr && std::string(transport) == "grpc") {
    config.session_transport = ClientConfig::SessionTransport::kGrpc;
  }
  return config;
}

std::unique_ptr<CoordinationClientImpl> Connected(int port, int task, int num_tasks,
                                                  ClientCallbacks callbacks = {},
                                                  base::Incarnation incarnation = 0) {
  auto client = CoordinationClientImpl::Create(ConfigFor(port, task, num_tasks, incarnation),
                                               std::move(callbacks));
  EXPECT_THAT(client, IsOk());
  EXPECT_THAT((*client)->Connect(absl::Seconds(20)), IsOk());
  return *std::move(client);
}

TEST(GrpcClient, Connect_RegistersTaskAndOpensSession) {
  Coordinator coordinator(2);
  auto client = Connected(coordinator.port(), 1, 2);
  EXPECT_TRUE(client->connected());
  EXPECT_EQ(coordinator.service().Snapshot().tasks[1].state, TaskState::kConnected);
}

TEST(GrpcClient, WrongToken_IsUnauthenticatedAndCounted) {
  Coordinator coordinator(1);
  auto client = *CoordinationClientImpl::Create(ConfigFor(coordinator.port(), 0, 1, 0, "nope"));
  EXPECT_THAT(client->Connect(absl::Seconds(20)),
              StatusIs(absl::StatusCode::kUnauthenticated, HasSubstr("wrong job token")));
  EXPECT_GE(coordinator.AuthFailures(), 1);
  EXPECT_EQ(coordinator.service().Snapshot().tasks[0].state, TaskState::kUnregistered);
}

TEST(GrpcClient, WrongJob_IsRefusedBeforeTakingPart) {
  Coordinator coordinator(2);
  ClientConfig config = ConfigFor(coordinator.port(), 0, 2);
  config.job = "another-job";
  auto client = *CoordinationClientImpl::Create(config);
  EXPECT_THAT(client->Connect(absl::Seconds(20)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("serves job 'test'")));
  EXPECT_EQ(coordinator.service().Snapshot().tasks[0].state, TaskState::kUnregistered);
}

TEST(GrpcClient, MissingToken_IsUnauthenticated) {
  Coordinator coordinator(1);
  auto channel = grpc::CreateChannel("127.0.0.1:" + std::to_string(coordinator.port()),
                                     grpc::InsecureChannelCredentials());
  auto stub = coord::v1::Coordination::NewStub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  coord::v1::KeyValueTryGetRequest request;
  request.set_key("k");
  coord::v1::KeyValueGetResponse response;
  grpc::Status status = stub->KeyValueTryGet(&ctx, request, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_THAT(status.error_message(), HasSubstr("missing job token"));
}

TEST(GrpcClient, BarrierAndKeyValue_AcrossThreeTasks) {
  Coordinator coordinator(3);
  std::vector<std::unique_ptr<CoordinationClientImpl>> clients;
  for (int i = 0; i < 3; ++i) clients.push_back(Connected(coordinator.port(), i, 3));

  std::vector<std::thread> threads;
  std::atomic<int> passed{0};
  for (int i = 0; i < 3; ++i) {
    threads.emplace_back([&, i] {
      if (clients[i]->Barrier("start", absl::Seconds(20)).ok()) ++passed;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(passed.load(), 3);

  std::string got;
  std::thread getter([&] {
    absl::StatusOr<std::string> value = clients[1]->KvGet("nccl/clique/id", absl::Seconds(20));
    if (value.ok()) got = *value;
  });
  EXPECT_THAT(clients[0]->KvInsert("nccl/clique/id", std::string("\0\1\2", 3), false), IsOk());
  getter.join();
  EXPECT_EQ(got, std::string("\0\1\2", 3));
  EXPECT_THAT(clients[2]->KvInsert("nccl/clique/id", "x", false),
              StatusIs(absl::StatusCode::kAlreadyExists));
  auto dir = clients[2]->KvGetDir("nccl");
  ASSERT_THAT(dir, IsOk());
  EXPECT_EQ(dir->size(), 1u);
  EXPECT_EQ(*clients[2]->KvDelete("nccl"), 1);
  EXPECT_THAT(clients[2]->KvTryGet("nccl/clique/id"), StatusIs(absl::StatusCode::kNotFound));
}

// Add and compare-and-set through the real server: tasks counting arrivals and electing one.
TEST(GrpcClient, KvAddAndCompareAndSet_CountAndElectAcrossTasks) {
  Coordinator coordinator(3);
  std::vector<std::unique_ptr<CoordinationClientImpl>> clients;
  for (int t = 0; t < 3; ++t) clients.push_back(Connected(coordinator.port(), t, 3));
  std::vector<std::thread> adders;
  for (int t = 0; t < 3; ++t) {
    adders.emplace_back([&, t] {
      for (int i = 0; i < 50; ++i) ASSERT_THAT(clients[t]->KvAdd("arrived", 1), IsOk());
    });
  }
  for (std::thread& a : adders) a.join();
  EXPECT_EQ(*clients[0]->KvTryGet("arrived"), "150");  // no add lost
  EXPECT_THAT(clients[1]->KvAdd("arrived", -150), IsOkAndHolds(int64_t{0}));
  ASSERT_THAT(clients[0]->KvInsert("name", "w", false), IsOk());
  EXPECT_THAT(clients[0]->KvAdd("name", 1), StatusIs(absl::StatusCode::kFailedPrecondition));

  int winners = 0;
  for (int t = 0; t < 3; ++t) {
    auto r = clients[t]->KvCompareAndSet("leader", std::nullopt, absl::StrCat("task-", t));
    ASSERT_THAT(r, IsOk());
    winners += r->swapped ? 1 : 0;
    EXPECT_EQ(r->value, "task-0");  // the first one's, whoever asks
  }
  EXPECT_EQ(winners, 1);
  auto none = clients[2]->KvCompareAndSet("absent", std::string("x"), "y");
  ASSERT_THAT(none, IsOk());
  EXPECT_FALSE(none->swapped);
  EXPECT_EQ(none->value, std::nullopt);
}

// The short key-value calls ride the session (a stream message, not a unary call each): the
// coordinator counts them under their session names.
TEST(GrpcClient, ShortKeyValueCalls_RideTheSession) {
  Coordinator coordinator(1);
  auto client = Connected(coordinator.port(), 0, 1);
  ASSERT_THAT(client->KvAdd("n", 2), IsOkAndHolds(int64_t{2}));
  EXPECT_THAT(client->KvTryGet("n"), IsOkAndHolds(std::string("2")));
  EXPECT_THAT(client->KvTryGet("absent"), StatusIs(absl::StatusCode::kNotFound));
  auto swapped = client->KvCompareAndSet("n", std::string("2"), "3");
  ASSERT_THAT(swapped, IsOk());
  EXPECT_TRUE(swapped->swapped);
  EXPECT_THAT(client->KvDelete("n"), IsOkAndHolds(1));
  for (const char* method : {"Session.KeyValueAdd", "Session.KeyValueTryGet",
                             "Session.KeyValueCompareAndSet", "Session.KeyValueDelete"}) {
    EXPECT_GE(coordinator.Metric("phalanx_coordinator_rpcs_total", "method", method), 1) << method;
  }
  EXPECT_EQ(coordinator.Metric("phalanx_coordinator_rpcs_total", "method", "KeyValueAdd"), -1)
      << "an add went as a unary call";
}

// Quotas reach a client through the real server as RESOURCE_EXHAUSTED with their message.
TEST(GrpcClient, KvQuota_IsResourceExhausted_NamingTheQuotaAndUse) {
  coord::CoordinationService::Options options;
  options.kv_limits.max_keys = 2;
  Coordinator coordinator(1, options);
  auto client = Connected(coordinator.port(), 0, 1);
  ASSERT_THAT(client->KvInsert("a", "1", false), IsOk());
  ASSERT_THAT(client->KvInsert("b", "2", false), IsOk());
  EXPECT_THAT(client->KvInsert("c", "3", false),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       HasSubstr("key-value store is full: 2 of 2 keys (--kv_max_keys)")));
  ASSERT_THAT(client->KvDelete("a"), IsOk());
  EXPECT_THAT(client->KvInsert("c", "3", false), IsOk());
}

// A directory larger than one answer still comes back whole: the client pages.
TEST(GrpcClient, KvGetDir_LargerThanOneAnswer_IsPagedTransparently) {
  coord::CoordinationService::Options options;
  options.kv_limits.max_key_bytes = 64;
  options.kv_limits.max_value_bytes = 1000;
  options.kv_limits.max_dir_bytes = 2100;  // two entries per answer
  Coordinator coordinator(1, options);
  auto client = Connected(coordinator.port(), 0, 1);
  for (int i = 0; i < 9; ++i) {
    ASSERT_THAT(client->KvInsert(absl::StrCat("dir/", i), std::string(1000, 'a' + i), false),
                IsOk());
  }
  auto dir = client->KvGetDir("dir");
  ASSERT_THAT(dir, IsOk());
  ASSERT_EQ(dir->size(), 9u);
  for (int i = 0; i < 9; ++i) {
    EXPECT_EQ((*dir)[i].first, absl::StrCat("dir/", i));
    EXPECT_EQ((*dir)[i].second, std::string(1000, 'a' + i));
  }
}

TEST(GrpcClient, BarrierTimeout_NamesTheMissingTask) {
  Coordinator coordinator(2);
  auto client = Connected(coordinator.port(), 0, 2);
  EXPECT_THAT(client->Barrier("lonely", absl::Milliseconds(300)),
              StatusIs(absl::StatusCode::kDeadlineExceeded, HasSubstr("never arrived: 1")));
}

TEST(GrpcClient, MalformedAndOversizedRequests_AreRejected) {
  Coordinator coordinator(1);
  auto client = Connected(coordinator.port(), 0, 1);
  EXPECT_THAT(client->KvInsert("bad key", "v", true), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(client->KvInsert("big", std::string((1 << 20) + 10, 'x'), true),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("limit")));
  // Beyond the server's message limit the transport itself refuses it.
  EXPECT_THAT(client->KvInsert("huge", std::string(5 << 20, 'x'), true),
              StatusIs(absl::StatusCode::kResourceExhausted));
  EXPECT_THAT(client->Barrier("", absl::Seconds(1)), StatusIs(absl::StatusCode::kInvalidArgument));

  auto channel = grpc::CreateChannel("127.0.0.1:" + std::to_string(coordinator.port()),
                                     grpc::InsecureChannelCredentials());
  auto stub = coord::v1::Coordination::NewStub(channel);
  {
    grpc::ClientContext ctx;
    ctx.AddMetadata(coord::kAuthorizationHeader, std::string("Bearer ") + kToken);
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    coord::v1::BarrierRequest no_task;
    no_task.set_barrier_id("b");
    coord::v1::BarrierResponse response;
    grpc::Status status = stub->Barrier(&ctx, no_task, &response);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(status.error_message(), HasSubstr("no task"));
  }
  {
    // A session whose first message is not 'open'.
    grpc::ClientContext ctx;
    ctx.AddMetadata(coord::kAuthorizationHeader, std::string("Bearer ") + kToken);
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    auto stream = stub->Session(&ctx);
    coord::v1::SessionRequest heartbeat;
    heartbeat.mutable_heartbeat()->set_sent_unix_micros(1);
    stream->Write(heartbeat);
    coord::v1::SessionEvent event;
    while (stream->Read(&event)) {
    }
    grpc::Status status = stream->Finish();
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(status.error_message(), HasSubstr("open"));
  }
}

TEST(GrpcClient, PeerGone_EverySurvivorLearnsWhichTaskDied) {
  Coordinator coordinator(3);
  std::atomic<int> told[3] = {-1, -1, -1};
  std::vector<std::unique_ptr<CoordinationClientImpl>> clients;
  for (int i = 0; i < 3; ++i) {
    ClientCallbacks callbacks;
    callbacks.on_peer_change = [&told, i](const TaskInfo& info) {
      if (info.state == TaskState::kFailed) told[i] = info.task_id;
    };
    clients.push_back(Connected(coordinator.port(), i, 3, std::move(callbacks)));
  }
  clients[1].reset();  // its session breaks
  EXPECT_TRUE(Eventually([&] { return told[0] == 1 && told[2] == 1; }, absl::Seconds(20)));
  EXPECT_EQ(coordinator.service().Snapshot().tasks[1].state, TaskState::kFailed);
}

TEST(GrpcClient, NewIncarnation_SupersedesOldClient_WhichIsToldWhy) {
  Coordinator coordinator(1);
  std::atomic<bool> fatal{false};
  absl::Mutex mu;
  absl::Status why;
  ClientCallbacks callbacks;
  callbacks.on_fatal = [&](const absl::Status& status) {
    absl::MutexLock lock(&mu);
    why = status;
    fatal = true;
  };
  auto old_client = Connected(coordinator.port(), 0, 1, std::move(callbacks), 0);
  auto new_client = Connected(coordinator.port(), 0, 1, {}, 1);
  EXPECT_TRUE(Eventually([&] { return fatal.load(); }, absl::Seconds(20)));
  absl::MutexLock lock(&mu);
  EXPECT_THAT(why, StatusIs(absl::StatusCode::kAborted, HasSubstr("superseded by 1")));
  EXPECT_THAT(old_client->KvTryGet("x"), StatusIs(absl::StatusCode::kNotFound));  // still usable
  EXPECT_THAT(old_client->Barrier("b", absl::Seconds(1)), StatusIs(absl::StatusCode::kAborted));
}

TEST(GrpcStatus, CancelledFromGrpcItself_IsUnavailable_ButTheServicesOwnCancelledIsKept) {
  // gRPC cancels what is still in flight when a server shuts down; an older coordinator also
  // answered Cancelled when stopping. The client never cancels a call whose result reaches a
  // caller, so to it such a Cancelled means the coordinator went away: retry (issue 13).
  EXPECT_THAT(coord::FromGrpcStatus(grpc::Status(grpc::StatusCode::CANCELLED, "Cancelled")),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("retry")));
  EXPECT_THAT(coord::FromGrpcStatus(
                  grpc::Status(grpc::StatusCode::CANCELLED, "coordinator is shutting down")),
              StatusIs(absl::StatusCode::kUnavailable));
  // A cancellation the service decided on (a peer cancelled the barrier) stays Cancelled.
  EXPECT_THAT(coord::FromGrpcStatus(
                  coord::ToGrpcStatus(absl::CancelledError("barrier 'b' cancelled by task 1"))),
              StatusIs(absl::StatusCode::kCancelled, HasSubstr("cancelled by task 1")));
  EXPECT_THAT(coord::FromGrpcStatus(coord::ToGrpcStatus(absl::AbortedError("task restarted"))),
              StatusIs(absl::StatusCode::kAborted));
}

TEST(GrpcClient, CoordinatorRestart_ClientReconnectsAndReRegisters) {
  auto coordinator = std::make_unique<Coordinator>(1);
  const int port = coordinator->port();
  std::atomic<int> reconnects{0};
  std::atomic<bool> restarted{false};
  ClientCallbacks callbacks;
  callbacks.on_reconnect = [&](bool coordinator_restarted) {
    restarted = coordinator_restarted;
    ++reconnects;
  };
  auto client = Connected(port, 0, 1, std::move(callbacks));
  coordinator.reset();
  EXPECT_TRUE(Eventually([&] { return !client->connected(); }, absl::Seconds(20)));
  coordinator = std::make_unique<Coordinator>(1, port);
  EXPECT_TRUE(Eventually([&] { return reconnects.load() == 1; }, absl::Seconds(30)));
  EXPECT_TRUE(restarted.load());
  EXPECT_THAT(client->WaitUntilConnected(absl::Seconds(10)), IsOk());
  EXPECT_EQ(coordinator->service().Snapshot().tasks[0].state, TaskState::kConnected);
  EXPECT_THAT(client->Barrier("after-restart", absl::Seconds(10)), IsOk());
}

TEST(GrpcClient, Preemption_EveryTaskReachesTheSameSyncPoint) {
  Coordinator coordinator(3);
  std::vector<std::unique_ptr<CoordinationClientImpl>> clients;
  std::atomic<int> notified{0};
  for (int i = 0; i < 3; ++i) {
    ClientCallbacks callbacks;
    callbacks.on_preemption = [&](const PreemptionRound&) { ++notified; };
    clients.push_back(Connected(coordinator.port(), i, 3, std::move(callbacks)));
  }
  // Tasks run at different speeds: when the notice comes, task i has checked steps 0..2+i.
  for (int i = 0; i < 3; ++i) {
    for (int step = 0; step < 3 + i; ++step) EXPECT_FALSE(*clients[i]->ReachedSyncPoint(step));
  }
  ASSERT_THAT(clients[0]->NotifyPreemption({"test", absl::Now() + absl::Seconds(30), {2}}), IsOk());
  ASSERT_TRUE(Eventually([&] { return notified.load() == 3; }, absl::Seconds(20)));
  // Each reports its first unchecked step (3, 4, 5) at once; all must stop at the largest.
  std::vector<int64_t> sync_step(3, -1);
  std::vector<std::thread> threads;
  for (int i = 0; i < 3; ++i) {
    threads.emplace_back([&, i] {
      for (int64_t step = 3 + i; step < 20; ++step) {
        absl::StatusOr<bool> reached = clients[i]->ReachedSyncPoint(step);
        if (!reached.ok()) return;
        if (*reached) {
          if (sync_step[i] != -1)
            sync_step[i] = -2;  // reached twice: wrong
          else
            sync_step[i] = step;
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(sync_step[0], 5);
  EXPECT_EQ(sync_step[1], 5);
  EXPECT_EQ(sync_step[2], 5);
}

// The race that used to deadlock: task 0 checks step 7 before it hears of the round and goes
// into step 7's collective; task 1 hears first and checks step 7 after. Task 0 reports from its
// session, so task 1's check is answered without task 0 calling ReachedSyncPoint again.
TEST(GrpcClient, Preemption_APeerThatCheckedTheStepBeforeTheNoticeDoesNotBlockTheOthers) {
  Coordinator coordinator(2);
  std::atomic<int> notified{0};
  std::vector<std::unique_ptr<CoordinationClientImpl>> clients;
  for (int i = 0; i < 2; ++i) {
    ClientCallbacks callbacks;
    callbacks.on_preemption = [&](const PreemptionRound&) { ++notified; };
    clients.push_back(Connected(coordinator.port(), i, 2, std::move(callbacks)));
  }
  for (int step = 0; step <= 7; ++step) EXPECT_FALSE(*clients[0]->ReachedSyncPoint(step));
  for (int step = 0; step < 7; ++step) EXPECT_FALSE(*clients[1]->ReachedSyncPoint(step));
  ASSERT_THAT(clients[0]->NotifyPreemption({"test", absl::Now() + absl::Seconds(30), {1}}), IsOk());
  ASSERT_TRUE(Eventually([&] { return notified.load() == 2; }, absl::Seconds(20)));
  // Task 1 checks step 7 (task 0 is "inside" step 7 and will not check again until step 8).
  absl::StatusOr<bool> at7 = clients[1]->ReachedSyncPoint(7);
  ASSERT_THAT(at7, IsOk());
  EXPECT_FALSE(*at7);
  EXPECT_TRUE(*clients[0]->ReachedSyncPoint(8));
  EXPECT_TRUE(*clients[1]->ReachedSyncPoint(8));
}

TEST(GrpcClient, Shutdown_AllTasks_LeavesNoFailure) {
  Coordinator coordinator(2);
  auto a = Connected(coordinator.port(), 0, 2);
  auto b = Connected(coordinator.port(), 1, 2);
  std::thread other([&] { EXPECT_THAT(b->Shutdown(absl::Seconds(20)), IsOk()); });
  EXPECT_THAT(a->Shutdown(absl::Seconds(20)), IsOk());
  other.join();
  a.reset();
  b.reset();
  EXPECT_TRUE(coordinator.service().AllTasksShutDown());
}

// Issue 35 (8): Leave is a departure on either session transport: the coordinator records
// SHUTDOWN "left: ..." (not FAILED) and the peer's barrier with the task keeps waiting; the
// leaving client's later calls fail instead of reconnecting.
TEST(GrpcClient, Leave_IsADepartureThePeerDoesNotFailFor) {
  Coordinator coordinator(2);
  auto a = Connected(coordinator.port(), 0, 2);
  auto b = Connected(coordinator.port(), 1, 2);
  absl::Notification passed;
  absl::Status barrier;
  std::thread waiter([&] {
    barrier = a->Barrier("together", absl::Seconds(30));
    passed.Notify();
  });
  ASSERT_THAT(b->Leave("done early", absl::Seconds(10)), IsOk());
  EXPECT_EQ(coordinator.service().Snapshot().tasks[1].state, TaskState::kShutdown);
  EXPECT_EQ(coordinator.service().Snapshot().tasks[1].reason, "left: done early");
  EXPECT_FALSE(b->connected());
  b.reset();  // the stream's end after the departure is no failure either
  EXPECT_EQ(coordinator.service().Snapshot().tasks[1].state, TaskState::kShutdown);
  EXPECT_FALSE(passed.WaitForNotificationWithTimeout(absl::Milliseconds(300)))
      << "the peer's barrier failed: " << barrier;
  auto back = Connected(coordinator.port(), 1, 2, {}, /*incarnation=*/1);
  EXPECT_THAT(back->Barrier("together", absl::Seconds(30)), IsOk());
  waiter.join();
  EXPECT_THAT(barrier, IsOk());
}

// A call in flight holds the gRPC channel: were its callback to run after the client is gone,
// the channel's last reference would drop on a gRPC thread, which gRPC 1.51 cannot survive (it
// joins the thread it is on). So the destructor cancels such calls and waits for them.
TEST(GrpcClient, Destroyed_WithACallInFlight_CancelsItAndRunsItsCallbackFirst) {
  Coordinator coordinator(2);
  // Registered (a waiter must be) but without a session, so the call goes as a unary RPC that
  // waits on the server for its key.
  ASSERT_THAT(coordinator.service().Register(TaskRef{0, 0}), IsOk());
  auto client = *CoordinationClientImpl::Create(ConfigFor(coordinator.port(), 0, 2));
  absl::Mutex mu;
  std::optional<absl::Status> result;
  client->KvGetAsync("never/set", absl::Minutes(10), [&](absl::StatusOr<std::string> value) {
    absl::MutexLock lock(&mu);
    result = value.status();
  });
  {
    absl::MutexLock lock(&mu);
    ASSERT_FALSE(result.has_value()) << "the get should wait for its key: " << *result;
  }
  client.reset();
  absl::MutexLock lock(&mu);
  ASSERT_TRUE(result.has_value()) << "the destructor returned before the call's callback ran";
  EXPECT_THAT(*result, StatusIs(absl::StatusCode::kCancelled));
}

TEST(GrpcClient, ReportRolledBack_ReachesTheJobStateOnce) {
  Coordinator coordinator(2);
  auto a = Connected(coordinator.port(), 0, 2);
  auto b = Connected(coordinator.port(), 1, 2);
  ASSERT_THAT(a->ReportRolledBack("e1", absl::Milliseconds(1500)), IsOk());
  ASSERT_THAT(b->ReportRolledBack("e1", absl::Milliseconds(1200)), IsOk());
  auto state = a->WatchJobState(0, absl::Seconds(1));
  ASSERT_THAT(state, IsOk());
  EXPECT_DOUBLE_EQ(state->rolled_back_seconds, 1.5);
  EXPECT_THAT(a->ReportRolledBack("e2", -absl::Seconds(1)),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(GrpcClient, ReportStepping_ReachesTheJobState) {
  Coordinator coordinator(2);
  auto a = Connected(coordinator.port(), 0, 2);
  auto before = a->WatchJobState(0, absl::Seconds(1));
  ASSERT_THAT(before, IsOk());
  EXPECT_EQ(before->stepping.first_step, absl::InfinitePast());
  ASSERT_THAT(a->ReportStepping(), IsOk());
  ASSERT_THAT(a->ReportStepping(), IsOk());  // the per-step call: answered without the wire
  auto after = a->WatchJobState(0, absl::Seconds(1));
  ASSERT_THAT(after, IsOk());
  EXPECT_NE(after->stepping.first_step, absl::InfinitePast());
  EXPECT_EQ(after->stepping.stepping_since, after->stepping.first_step);
  EXPECT_FALSE(after->stepping.regrouping);
}

TEST(GrpcClient, AliveTasks_AndWatchJobState) {
  Coordinator coordinator(2);
  auto a = Connected(coordinator.port(), 0, 2);
  auto b = Connected(coordinator.port(), 1, 2);
  absl::StatusOr<std::vector<TaskRef>> from_b;
  std::thread other([&] { from_b = b->GetAliveTasks({}, absl::Seconds(20)); });
  auto from_a = a->GetAliveTasks({}, absl::Seconds(20));
  other.join();
  ASSERT_THAT(from_a, IsOk());
  ASSERT_THAT(from_b, IsOk());
  EXPECT_EQ(*from_a, *from_b);
  EXPECT_EQ(from_a->size(), 2u);
  auto state = a->WatchJobState(0, absl::Seconds(1));
  ASSERT_THAT(state, IsOk());
  EXPECT_EQ(state->job, "test");
  EXPECT_EQ(state->tasks.size(), 2u);
}

}  // namespace
}  // namespace phalanx::client
