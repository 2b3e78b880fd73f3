// The coordinator's memory bounds (issue 16 item 2): key-value quotas and caps, barrier id caps,
// bounded finished-barrier memory, paged directory answers, and membership fan-out that stays
// O(N) when N sessions drop at once. In-process service, FakeClock.
#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "common/testing/fake_clock.h"
#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "prometheus/registry.h"
#include "runtime/coordination/service.h"
#include "runtime/coordination/service_test_util.h"

namespace phalanx::coord {
namespace {

using ::phalanx::coord::testing::Slot;
using ::phalanx::testing::IsOk;
using ::phalanx::testing::StatusIs;
using ::testing::HasSubstr;

class LimitsTest : public ::testing::Test {
 protected:
  void Start(int num_tasks, CoordinationService::Options options = {}) {
    options.job = "limits";
    options.num_tasks = num_tasks;
    options.heartbeat_interval = absl::Milliseconds(500);
    options.heartbeat_timeout = absl::Seconds(2);
    auto service = CoordinationService::Create(options, clock_, metrics_);
    ASSERT_THAT(service, IsOk());
    service_ = *std::move(service);
  }

  phalanx::testing::FakeClock clock_;
  prometheus::Registry registry_;
  CoordinatorMetrics metrics_{registry_};
  std::unique_ptr<CoordinationService> service_;
};

TEST_F(LimitsTest, Kv_DefaultKeyQuota_RefusesTheNextKey_NamingUseAndFlag) {
  Start(1);
  for (int i = 0; i < 100000; ++i) {
    ASSERT_THAT(service_->KvInsert(absl::StrCat("k/", i), "", false), IsOk()) << i;
  }
  EXPECT_THAT(service_->KvInsert("k/one-more", "", false),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       HasSubstr("100000 of 100000 keys (--kv_max_keys)")));
  // Overwriting an existing key adds no key, so it is still allowed.
  EXPECT_THAT(service_->KvInsert("k/7", "v", true), IsOk());
}

TEST_F(LimitsTest, Kv_DefaultByteQuota_RefusesPast64MiB_NamingUseAndFlag) {
  Start(1);
  const std::string mib(1 << 20, 'x');
  absl::Status refused;
  int accepted = 0;
  for (; accepted < 80; ++accepted) {
    refused = service_->KvInsert(absl::StrCat("v/", accepted), mib, false);
    if (!refused.ok()) break;
  }
  EXPECT_EQ(accepted, 63);  // 64 values and their keys are a little over 64 MiB
  EXPECT_THAT(refused, StatusIs(absl::StatusCode::kResourceExhausted,
                                HasSubstr("of 67108864 bytes (--kv_max_bytes)")));
}

TEST_F(LimitsTest, Barrier_OverlongId_IsInvalidArgumentNamingTheFlag) {
  Start(1);
  ASSERT_THAT(service_->Register({0, 0}), IsOk());
  Slot<absl::Status> done;
  service_->Barrier({0, 0}, std::string(513, 'b'), absl::Seconds(1), {}, done.Callback());
  ASSERT_TRUE(done.done());
  EXPECT_THAT(done.value(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--barrier_max_id_bytes")));
}

// A mass failure used to push every failed task's TaskInfo to every survivor as its own event:
// N drops queued N events per survivor (O(N²) in all; +777 MB at N = 3000). Membership events
// are coalesced per tick, so each survivor holds O(1) queued entries that share one batch.
TEST_F(LimitsTest, Membership_MassDropOf1000Sessions_QueuesConstantEntriesPerSurvivor) {
  constexpr int kTasks = 2000;
  constexpr int kDropped = 1000;
  Start(kTasks);
  std::vector<std::shared_ptr<SessionOutbox>> outboxes;
  std::vector<uint64_t> sessions;
  for (int i = 0; i < kTasks; ++i) {
    ASSERT_THAT(service_->Register({i, 0}), IsOk());
    outboxes.push_back(std::make_shared<SessionOutbox>());  // no transport: nothing drains
    auto session = service_->OpenSession({i, 0}, outboxes.back());
    ASSERT_THAT(session, IsOk());
    sessions.push_back(*session);
  }
  for (int i = kTasks - kDropped; i < kTasks; ++i) {
    service_->CloseSession(sessions[i], absl::UnavailableError("killed"));
  }
  service_->Tick(clock_.Now());
  for (int i = 0; i < kTasks - kDropped; ++i) {
    // The session header, then at most one immediate and one per-tick membership entry.
    ASSERT_LE(outboxes[i]->QueuedEntries(), 3u) << "survivor " << i;
  }
  // Every survivor still learns of every failure, once each, in its stream.
  for (int i : {0, kTasks - kDropped - 1}) {
    std::vector<int> failed;
    while (std::optional<SessionEvent> e = outboxes[i]->Pop()) {
      if (const auto* info = std::get_if<TaskInfo>(&*e)) {
        EXPECT_EQ(info->state, TaskState::kFailed);
        failed.push_back(info->task_id);
      }
    }
    std::sort(failed.begin(), failed.end());
    ASSERT_EQ(failed.size(), static_cast<size_t>(kDropped));
    for (int k = 0; k < kDropped; ++k) ASSERT_EQ(failed[k], kTasks - kDropped + k);
  }
}

TEST_F(LimitsTest, Kv_QuotaAccounting_IsExact_InsertDeleteInsert) {
  CoordinationService::Options options;
  options.kv_limits.max_keys = 3;
  options.kv_limits.max_bytes = 30;  // three keys of 2 bytes with values of 8
  Start(1, options);
  for (int round = 0; round < 3; ++round) {
    SCOPED_TRACE(round);
    for (const char* key : {"a1", "b1", "c1"}) {
      ASSERT_THAT(service_->KvInsert(key, "12345678", false), IsOk());
    }
    EXPECT_THAT(
        service_->KvInsert("d1", "", false),
        StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("3 of 3 keys (--kv_max_keys)")));
    // A larger overwrite needs bytes the store does not have; a smaller one gives some back.
    EXPECT_THAT(
        service_->KvInsert("a1", "123456789", true),
        StatusIs(absl::StatusCode::kResourceExhausted,
                 HasSubstr("30 of 30 bytes (--kv_max_bytes) in use, and 'a1' needs 1 more")));
    EXPECT_THAT(service_->KvInsert("a1", "1234567", true), IsOk());
    EXPECT_THAT(service_->KvInsert("a1", "12345678", true), IsOk());
    EXPECT_EQ(*service_->KvDelete("a1"), 1);
    EXPECT_EQ(*service_->KvDelete("b1"), 1);
    EXPECT_EQ(*service_->KvDelete("c1"), 1);
  }
}

TEST_F(LimitsTest, Kv_CapsNameTheirFlags) {
  CoordinationService::Options options;
  options.kv_limits.max_key_bytes = 8;
  options.kv_limits.max_value_bytes = 16;
  Start(1, options);
  EXPECT_THAT(service_->KvInsert("123456789", "", false),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("key is 9 bytes; the limit is 8 (--kv_max_key_bytes)")));
  EXPECT_THAT(service_->KvInsert("k", std::string(17, 'v'), false),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("17 bytes; the limit is 16 (--kv_max_value_bytes)")));
  EXPECT_THAT(service_->KvInsert("12345678", std::string(16, 'v'), false), IsOk());
}

TEST_F(LimitsTest, Kv_Create_RefusesLimitsOneEntryCannotFit) {
  CoordinationService::Options options;
  options.kv_limits.max_value_bytes = 2 << 20;
  options.kv_limits.max_dir_bytes = 1 << 20;
  options.num_tasks = 1;
  EXPECT_THAT(CoordinationService::Create(options, clock_, metrics_),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--kv_dir_max_bytes")));
}

TEST_F(LimitsTest, Kv_GetDir_PagesByEntriesAndBytes_AndUnpagedRefusesWhatDoesNotFit) {
  CoordinationService::Options options;
  options.kv_limits.max_dir_entries = 4;
  options.kv_limits.max_key_bytes = 16;
  options.kv_limits.max_value_bytes = 100;
  options.kv_limits.max_dir_bytes = 250;
  Start(1, options);
  for (int i = 0; i < 10; ++i) {
    ASSERT_THAT(
        service_->KvInsert(absl::StrCat("d/k", i), std::string(i == 5 ? 100 : 1, 'v'), false),
        IsOk());
  }
  ASSERT_THAT(service_->KvInsert("d2/other", "x", false), IsOk());
  std::vector<std::string> keys;
  std::vector<size_t> page_sizes;
  std::string token;
  do {
    auto page = service_->KvGetDir("d", token, /*paged=*/true);
    ASSERT_THAT(page, IsOk());
    ASSERT_FALSE(page->entries.empty());
    page_sizes.push_back(page->entries.size());
    for (const auto& [key, value] : page->entries) keys.push_back(key);
    token = page->next_page_token;
    // A key inserted behind the cursor between pages does not disturb the rest.
    if (page_sizes.size() == 1) {
      ASSERT_THAT(service_->KvInsert("d/a", "x", false), IsOk());
    }
  } while (!token.empty() && page_sizes.size() < 20);
  EXPECT_EQ(page_sizes, (std::vector<size_t>{4, 4, 2}));
  EXPECT_THAT(keys, ::testing::ElementsAre("d/k0", "d/k1", "d/k2", "d/k3", "d/k4", "d/k5", "d/k6",
                                           "d/k7", "d/k8", "d/k9"));
  // 10 entries of ~4 bytes + one of 104 fit 250 bytes unpaged; one more big value does not.
  EXPECT_THAT(service_->KvGetDir("d"), IsOk());
  ASSERT_THAT(service_->KvInsert("d/big", std::string(100, 'v'), false), IsOk());
  ASSERT_THAT(service_->KvInsert("d/big2", std::string(100, 'v'), false), IsOk());
  EXPECT_THAT(service_->KvGetDir("d"),
              StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("--kv_dir_max_bytes")));
  EXPECT_THAT(service_->KvGetDir("d", "e/zzz", true),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("page token")));
}

TEST_F(LimitsTest, Kv_LargeDeletes_HandMemoryBack_SmallOnesDoNot) {
  int releases = 0;
  CoordinationService::Options options;
  options.release_memory_after_bytes = 1000;
  options.release_memory = [&releases] { ++releases; };
  Start(1, options);
  ASSERT_THAT(service_->KvInsert("small", "v", false), IsOk());
  ASSERT_THAT(service_->KvDelete("small"), IsOk());
  EXPECT_EQ(releases, 0);
  for (int i = 0; i < 10; ++i) {
    ASSERT_THAT(service_->KvInsert(absl::StrCat("big/", i), std::string(100, 'v'), false), IsOk());
  }
  ASSERT_THAT(service_->KvDelete("big"), IsOk());
  EXPECT_EQ(releases, 1);
}

TEST_F(LimitsTest, Barrier_FinishedResults_AreBoundedByCountAndBytes) {
  CoordinationService::Options options;
  options.barrier_limits.max_finished = 100;
  options.barrier_limits.max_finished_bytes = 64 * 1024;
  options.barrier_limits.max_id_bytes = 4096;
  Start(1, options);
  ASSERT_THAT(service_->Register({0, 0}), IsOk());
  for (int i = 0; i < 1000; ++i) {
    Slot<absl::Status> done;
    // Long ids: the byte bound binds before the count bound.
    service_->Barrier({0, 0}, absl::StrCat(i, std::string(4000, 'b')), absl::Seconds(1), {},
                      done.Callback());
    ASSERT_TRUE(done.done());
    ASSERT_THAT(done.value(), IsOk());
  }
  // 64 KiB / ~4 KiB per result: 16 kept.
  auto snapshot_counts = service_->BarrierMemory();
  EXPECT_LE(snapshot_counts.second, 64u * 1024);
  EXPECT_EQ(snapshot_counts.first, 16u);
  for (int i = 0; i < 1000; ++i) {
    Slot<absl::Status> done;
    service_->Barrier({0, 0}, absl::StrCat("short-", i), absl::Seconds(1), {}, done.Callback());
    ASSERT_TRUE(done.done());
  }
  EXPECT_EQ(service_->BarrierMemory().first, 100u);
  // The newest results still answer a late (retried) arrival at once.
  Slot<absl::Status> retry;
  service_->Barrier({0, 0}, "short-999", absl::Seconds(1), {}, retry.Callback());
  ASSERT_TRUE(retry.done());
  EXPECT_THAT(retry.value(), IsOk());
}

TEST_F(LimitsTest, ReportError_LongMessage_IsTruncatedBeforeFanOut) {
  Start(2);
  ASSERT_THAT(service_->Register({0, 0}), IsOk());
  ASSERT_THAT(service_->Register({1, 0}), IsOk());
  testing::RecordingSession peer;
  ASSERT_THAT(service_->OpenSession({1, 0}, peer.outbox()), IsOk());
  ASSERT_THAT(service_->ReportError({0, 0}, std::string(1 << 20, 'e')), IsOk());
  auto errors = peer.EventsOf<ErrorReport>();
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_LE(errors[0].message.size(), 4096u + 32);
  EXPECT_THAT(errors[0].message, HasSubstr("(truncated)"));
}

// Heartbeat timeouts found by one tick go out as one batch.
TEST_F(LimitsTest, Membership_MassHeartbeatTimeout_IsOneEntryPerSurvivor) {
  constexpr int kTasks = 200;
  Start(kTasks);
  std::vector<std::shared_ptr<SessionOutbox>> outboxes;
  std::vector<uint64_t> sessions;
  for (int i = 0; i < kTasks; ++i) {
    ASSERT_THAT(service_->Register({i, 0}), IsOk());
    outboxes.push_back(std::make_shared<SessionOutbox>());
    sessions.push_back(*service_->OpenSession({i, 0}, outboxes.back()));
  }
  clock_.Advance(absl::Seconds(1));
  service_->Heartbeat(sessions[0], 0);  // only task 0 stays alive
  clock_.Advance(absl::Milliseconds(1500));
  service_->Tick(clock_.Now());
  // The header, the heartbeat's ack and one batch of 199 failures.
  EXPECT_EQ(outboxes[0]->QueuedEntries(), 3u);
  // A later single failure is pushed at once, not held for the next tick.
  ASSERT_THAT(service_->Register({5, 1}), IsOk());
  EXPECT_EQ(outboxes[0]->QueuedEntries(), 4u);
}

// Every task reporting an error at once (an NCCL failure everywhere) used to push each report to
// every session: N² events of up to 4 KiB each. Reports are coalesced like membership changes.
TEST_F(LimitsTest, ReportError_StormOf1000Reports_QueuesConstantEntriesPerSurvivor) {
  constexpr int kTasks = 2000;
  constexpr int kReporting = 1000;
  Start(kTasks);
  std::vector<std::shared_ptr<SessionOutbox>> outboxes;
  for (int i = 0; i < kTasks; ++i) {
    ASSERT_THAT(service_->Register({i, 0}), IsOk());
    outboxes.push_back(std::make_shared<SessionOutbox>());
    ASSERT_THAT(service_->OpenSession({i, 0}, outboxes.back()), IsOk());
  }
  for (int i = kTasks - kReporting; i < kTasks; ++i) {
    ASSERT_THAT(service_->ReportError({i, 0}, std::string(1000, 'e')), IsOk());
  }
  service_->Tick(clock_.Now());
  for (int i = 0; i < kTasks - kReporting; ++i) {
    ASSERT_LE(outboxes[i]->QueuedEntries(), 3u) << "survivor " << i;
  }
  // The survivor hears each report, then that task's failure, in that order.
  std::vector<int> reported;
  std::vector<int> failed;
  while (std::optional<SessionEvent> e = outboxes[0]->Pop()) {
    if (const auto* report = std::get_if<ErrorReport>(&*e)) {
      EXPECT_FALSE(std::count(failed.begin(), failed.end(), report->task.task_id));
      reported.push_back(report->task.task_id);
    } else if (const auto* info = std::get_if<TaskInfo>(&*e)) {
      EXPECT_TRUE(std::count(reported.begin(), reported.end(), info->task_id));
      failed.push_back(info->task_id);
    }
  }
  EXPECT_EQ(reported.size(), static_cast<size_t>(kReporting));
  EXPECT_EQ(failed.size(), static_cast<size_t>(kReporting));
}

// A single report and the failure it causes reach peers at once, not a tick later.
TEST_F(LimitsTest, ReportError_Single_ReportAndFailureArriveWithoutATick) {
  Start(2);
  ASSERT_THAT(service_->Register({0, 0}), IsOk());
  ASSERT_THAT(service_->Register({1, 0}), IsOk());
  testing::RecordingSession peer;
  ASSERT_THAT(service_->OpenSession({1, 0}, peer.outbox()), IsOk());
  ASSERT_THAT(service_->ReportError({0, 0}, "nccl died"), IsOk());
  EXPECT_EQ(peer.EventsOf<ErrorReport>().size(), 1u);
  ASSERT_EQ(peer.EventsOf<TaskInfo>().size(), 1u);
  EXPECT_EQ(peer.EventsOf<TaskInfo>()[0].state, TaskState::kFailed);
}

// One session can carry any number of calls: pending barriers (each holding its participant list)
// and blocked gets are capped too, or one token holder could pin memory without bound.
TEST_F(LimitsTest, Barrier_DefaultPendingCap_RefusesANewBarrier_ButJoinsExistingOnes) {
  Start(2);
  ASSERT_THAT(service_->Register({0, 0}), IsOk());
  ASSERT_THAT(service_->Register({1, 0}), IsOk());
  std::vector<std::unique_ptr<Slot<absl::Status>>> waits;
  Slot<absl::Status> refused, joined, now_fits;
  // Pending calls end (Cancelled) before the slots they write to go away.
  absl::Cleanup stop = [this] { service_->Stop(); };
  for (int i = 0; i < 1024; ++i) {
    waits.push_back(std::make_unique<Slot<absl::Status>>());
    service_->Barrier({0, 0}, absl::StrCat("b", i), absl::Minutes(1), {}, waits.back()->Callback());
    ASSERT_FALSE(waits.back()->done()) << i;
  }
  service_->Barrier({0, 0}, "one-more", absl::Minutes(1), {}, refused.Callback());
  ASSERT_TRUE(refused.done());
  EXPECT_THAT(refused.value(), StatusIs(absl::StatusCode::kResourceExhausted,
                                        HasSubstr("1024 of 1024 pending barriers "
                                                  "(--barrier_max_pending)")));
  // Joining a pending barrier needs no room, and a passed one frees its slot.
  service_->Barrier({1, 0}, "b7", absl::Minutes(1), {}, joined.Callback());
  ASSERT_TRUE(joined.done());
  EXPECT_THAT(joined.value(), IsOk());
  service_->Barrier({0, 0}, "one-more", absl::Minutes(1), {}, now_fits.Callback());
  EXPECT_FALSE(now_fits.done());
}

TEST_F(LimitsTest, Kv_DefaultWaiterCap_RefusesANewBlockedGet_ButAnswersPresentKeys) {
  Start(1);
  std::vector<std::unique_ptr<Slot<absl::StatusOr<std::string>>>> gets;
  Slot<absl::StatusOr<std::string>> refused, present;
  absl::Cleanup stop = [this] { service_->Stop(); };
  for (int i = 0; i < 32768; ++i) {
    gets.push_back(std::make_unique<Slot<absl::StatusOr<std::string>>>());
    service_->KvGet(absl::StrCat("w/", i), std::nullopt, absl::Minutes(1), gets.back()->Callback());
  }
  ASSERT_FALSE(gets.back()->done());
  service_->KvGet("w/one-more", std::nullopt, absl::Minutes(1), refused.Callback());
  ASSERT_TRUE(refused.done());
  EXPECT_THAT(refused.value(),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       HasSubstr("32768 of 32768 blocked gets (--kv_max_waiters)")));
  ASSERT_THAT(service_->KvInsert("present", "v", false), IsOk());
  service_->KvGet("present", std::nullopt, absl::Minutes(1), present.Callback());
  ASSERT_TRUE(present.done());
  EXPECT_THAT(present.value(), IsOk());
}

TEST_F(LimitsTest, Barrier_PendingCap_NeverBlocksTheShutdownBarrier) {
  CoordinationService::Options options;
  options.barrier_limits.max_pending = 1;
  Start(2, options);
  ASSERT_THAT(service_->Register({0, 0}), IsOk());
  ASSERT_THAT(service_->Register({1, 0}), IsOk());
  Slot<absl::Status> user, shutdown0, shutdown1;
  absl::Cleanup stop = [this] { service_->Stop(); };
  service_->Barrier({0, 0}, "user", absl::Minutes(1), {}, user.Callback());
  ASSERT_FALSE(user.done());
  service_->Shutdown({0, 0}, absl::Minutes(1), shutdown0.Callback());
  EXPECT_FALSE(shutdown0.done());
  service_->Shutdown({1, 0}, absl::Minutes(1), shutdown1.Callback());
  ASSERT_TRUE(shutdown1.done());
  EXPECT_THAT(shutdown1.value(), IsOk());
}

// Arrivals hold calls: 64 tasks waiting at 1024 barriers each reach the default cap of 65,536;
// one more waiting arrival is refused until some barrier ends.
TEST_F(LimitsTest, Barrier_DefaultWaitingArrivalCap_RefusesOneMoreWaiter) {
  constexpr int kTasks = 66;  // tasks 64 and 65 have not arrived anywhere
  Start(kTasks);
  for (int t = 0; t < kTasks; ++t) ASSERT_THAT(service_->Register({t, 0}), IsOk());
  std::vector<std::unique_ptr<Slot<absl::Status>>> waits;
  Slot<absl::Status> refused, after_cancel;
  absl::Cleanup stop = [this] { service_->Stop(); };
  for (int t = 0; t < 64; ++t) {
    for (int b = 0; b < 1024; ++b) {
      waits.push_back(std::make_unique<Slot<absl::Status>>());
      service_->Barrier({t, 0}, absl::StrCat("b", b), absl::Minutes(1), {},
                        waits.back()->Callback());
      ASSERT_FALSE(waits.back()->done()) << t << " " << b;
    }
  }
  service_->Barrier({64, 0}, "b5", absl::Minutes(1), {}, refused.Callback());
  ASSERT_TRUE(refused.done());
  EXPECT_THAT(refused.value(), StatusIs(absl::StatusCode::kResourceExhausted,
                                        HasSubstr("65536 of 65536 (--barrier_max_waiting)")));
  ASSERT_THAT(service_->CancelBarrier({64, 0}, "b5"), IsOk());
  service_->Barrier({64, 0}, "b6", absl::Minutes(1), {}, after_cancel.Callback());
  EXPECT_FALSE(after_cancel.done());
}

}  // namespace
}  // namespace phalanx::coord
