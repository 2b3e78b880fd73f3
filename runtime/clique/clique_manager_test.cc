#include "runtime/clique/clique_manager.h"

#include <memory>
#include <vector>

#include "common/testing/fake_clock.h"
#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/clique/fake_nccl.h"
#include "runtime/clique/in_memory_unique_id_exchange.h"

namespace phalanx::clique {
namespace {

using ::phalanx::testing::IsOk;
using ::phalanx::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Pair;

constexpr int kTasks = 4;

// Four tasks with one GPU each; manager i plays task i (rank i). They share one FakeNccl and
// one in-memory exchange, as the processes of a job share NCCL's network and the KV store.
class CliqueManagerTest : public ::testing::Test {
 protected:
  void Init(FakeNccl::Options nccl_options = {}, CliqueManager::Options options = {}) {
    nccl_ = std::make_unique<FakeNccl>(nccl_options);
    options_ = options;
    managers_.clear();
    ids_.clear();
    for (int t = 0; t < kTasks; ++t) {
      managers_.push_back(std::make_unique<CliqueManager>(*nccl_, exchange_, clock_, options_));
      ids_.push_back(0);
    }
  }

  static CliqueKey Key(std::vector<base::Incarnation> incarnations,
                       std::vector<int> tasks = {0, 1, 2, 3}) {
    std::vector<CliqueMember> members;
    for (size_t i = 0; i < tasks.size(); ++i) members.push_back({tasks[i], incarnations[i], {0}});
    return *CliqueKey::Create("job", members);
  }

  // Acquires `key` on every listed task's manager, highest rank first (so the others look
  // for the unique id before rank 0 has published it).
  void AcquireAll(const CliqueKey& key, std::vector<int> tasks = {3, 2, 1, 0},
                  absl::Duration timeout = absl::Seconds(30)) {
    for (int t : tasks) {
      auto id = managers_[t]->Acquire(key, *key.RankOf(t, 0), clock_.Now() + timeout);
      ASSERT_THAT(id, IsOk());
      ids_[t] = *id;
    }
  }

  void PollAll(int rounds = 3) {
    for (int r = 0; r < rounds; ++r) {
      for (auto& m : managers_) {
        if (m != nullptr) m->Poll(clock_.Now());
      }
    }
  }

  CliqueInfo Info(int task) { return *managers_[task]->Get(ids_[task]); }
  CliqueState State(int task) { return Info(task).state; }

  // Task `task` restarts: its process (manager) dies, the next incarnation acquires `key`.
  void Restart(int task, const CliqueKey& key) {
    managers_[task] = std::make_unique<CliqueManager>(*nccl_, exchange_, clock_, options_);
    AcquireAll(key, {task});
  }

  void FormAll() {
    AcquireAll(Key({0, 0, 0, 0}));
    PollAll();
    for (int t = 0; t < kTasks; ++t) ASSERT_EQ(State(t), CliqueState::kReady) << "task " << t;
  }

  phalanx::testing::FakeClock clock_;
  InMemoryUniqueIdExchange exchange_;
  std::unique_ptr<FakeNccl> nccl_;
  CliqueManager::Options options_;
  std::vector<std::unique_ptr<CliqueManager>> managers_;
  std::vector<CliqueId> ids_;
};

TEST_F(CliqueManagerTest, FourRanks_FormOneReadyClique_WithOneUniqueId) {
  Init();
  AcquireAll(Key({0, 0, 0, 0}));
  for (int t = 0; t < kTasks; ++t) EXPECT_EQ(State(t), CliqueState::kForming);
  EXPECT_THAT(managers_[1]->Comm(ids_[1]),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("FORMING")));

  PollAll();

  for (int t = 0; t < kTasks; ++t) {
    SCOPED_TRACE(t);
    ASSERT_EQ(State(t), CliqueState::kReady);
    auto comm = managers_[t]->Comm(ids_[t]);
    ASSERT_THAT(comm, IsOk());
    EXPECT_EQ(nccl_->Info(*comm)->rank, t);
    EXPECT_EQ(nccl_->Info(*comm)->nranks, kTasks);
  }
  EXPECT_EQ(exchange_.published(), 1);
  EXPECT_EQ(nccl_->counts().inits, 4);
  EXPECT_EQ(managers_[0]->counters().cliques_by_state.at(CliqueState::kReady), 1);
}

TEST_F(CliqueManagerTest, Acquire_SameKeyAndRankTwice_IsAlreadyExists_AndABadRankIsInvalid) {
  Init();
  AcquireAll(Key({0, 0, 0, 0}), {0});
  EXPECT_THAT(managers_[0]->Acquire(Key({0, 0, 0, 0}), 0, clock_.Now() + absl::Seconds(1)),
              StatusIs(absl::StatusCode::kAlreadyExists));
  EXPECT_THAT(managers_[0]->Acquire(Key({0, 0, 0, 0}), 4, clock_.Now() + absl::Seconds(1)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("rank 4")));
}

TEST_F(CliqueManagerTest, RestartedMember_EverySurvivorRevokes_ThenReformsWithTheNewKey) {
  Init();
  FormAll();
  std::vector<CommHandle> old_comms;
  for (int t = 0; t < kTasks; ++t) old_comms.push_back(Info(t).comm);

  const CliqueKey new_key = Key({0, 0, 1, 0});
  Restart(2, new_key);
  const std::vector<MemberStatus> members = {{0, 0}, {1, 0}, {2, 1}, {3, 0}};
  for (int t : {0, 1, 3}) managers_[t]->OnMembershipChange(members);

  for (int t : {0, 1, 3}) {
    SCOPED_TRACE(t);
    EXPECT_EQ(State(t), CliqueState::kAborting);
    EXPECT_THAT(Info(t).status,
                StatusIs(absl::StatusCode::kAborted, HasSubstr("task 2 restarted")));
    EXPECT_TRUE(nccl_->Info(old_comms[t])->revoked);
    EXPECT_THAT(managers_[t]->Comm(ids_[t]), StatusIs(absl::StatusCode::kFailedPrecondition));
  }
  EXPECT_EQ(nccl_->counts().revokes, 3);

  PollAll(4);

  for (int t = 0; t < kTasks; ++t) {
    SCOPED_TRACE(t);
    CliqueInfo info = Info(t);
    EXPECT_EQ(info.state, CliqueState::kReady);
    EXPECT_EQ(info.key, new_key);
    EXPECT_FALSE(info.comm == old_comms[t]);
    EXPECT_TRUE(nccl_->Info(old_comms[t])->freed);
  }
  EXPECT_EQ(exchange_.published(), 2);  // a fresh unique id for the new key
  EXPECT_EQ(nccl_->live_comms(), kTasks);
  CliqueCounters c = managers_[0]->counters();
  EXPECT_EQ(c.aborts, 1);
  EXPECT_EQ(c.reforms, 1);
  EXPECT_EQ(c.shrinks, 0);
}

TEST_F(CliqueManagerTest, RestartedMember_WithoutRevoke_SurvivorsAbortAtOnce) {
  Init({.supports_revoke = false});
  FormAll();
  const CliqueKey new_key = Key({0, 3, 0, 0});
  Restart(1, new_key);
  for (int t : {0, 2, 3}) managers_[t]->OnMembershipChange({{{0, 0}, {1, 3}, {2, 0}, {3, 0}}});

  for (int t : {0, 2, 3}) EXPECT_EQ(State(t), CliqueState::kReforming);
  EXPECT_EQ(nccl_->counts().revokes, 0);
  EXPECT_EQ(nccl_->counts().aborts, 4);  // three survivors + the dead incarnation's process

  PollAll();
  for (int t = 0; t < kTasks; ++t) {
    EXPECT_EQ(State(t), CliqueState::kReady);
    EXPECT_EQ(Info(t).key, new_key);
  }
}

TEST_F(CliqueManagerTest, MemberLeftForGood_SurvivorsShrink_WithoutANewUniqueId) {
  Init();
  FormAll();
  managers_[1].reset();  // task 1 is gone and will not come back
  const std::vector<MemberStatus> members = {{0, 0}, {2, 0}, {3, 0}};
  for (int t : {0, 2, 3}) managers_[t]->OnMembershipChange(members);
  PollAll(2);  // the revoked communicators quiesce, then shrink
  for (int t : {0, 2, 3}) EXPECT_EQ(State(t), CliqueState::kShrinking);

  PollAll();

  const CliqueKey shrunk = Key({0, 0, 0}, {0, 2, 3});
  for (int t : {0, 2, 3}) {
    SCOPED_TRACE(t);
    CliqueInfo info = Info(t);
    ASSERT_EQ(info.state, CliqueState::kReady);
    EXPECT_EQ(info.key, shrunk);
    EXPECT_EQ(info.rank, *shrunk.RankOf(t, 0));
    EXPECT_EQ(nccl_->Info(info.comm)->rank, info.rank);
    EXPECT_TRUE(nccl_->Info(info.comm)->shrunk_child);
    EXPECT_EQ(managers_[t]->counters().shrinks, 1);
  }
  EXPECT_EQ(nccl_->counts().shrinks, 3);
  EXPECT_EQ(exchange_.published(), 1);
  EXPECT_EQ(nccl_->live_comms(), 3);
}

TEST_F(CliqueManagerTest, MemberLeftForGood_WithoutShrink_SurvivorsReformWithAFreshInit) {
  Init({.supports_revoke = false, .supports_shrink = false});
  FormAll();
  managers_[3].reset();
  for (int t : {0, 1, 2}) managers_[t]->OnMembershipChange({{{0, 0}, {1, 0}, {2, 0}}});
  PollAll();
  for (int t : {0, 1, 2}) {
    EXPECT_EQ(State(t), CliqueState::kReady);
    EXPECT_EQ(Info(t).key, Key({0, 0, 0}, {0, 1, 2}));
  }
  EXPECT_EQ(nccl_->counts().shrinks, 0);
  EXPECT_EQ(exchange_.published(), 2);
}

TEST_F(CliqueManagerTest, MemberDown_SurvivorsWait_UntilItsNextIncarnationRegisters) {
  Init();
  FormAll();
  for (int t : {0, 2, 3}) {
    managers_[t]->OnMembershipChange({{{0, 0}, {1, 0, /*alive=*/false}, {2, 0}, {3, 0}}});
  }
  PollAll();
  for (int t : {0, 2, 3}) EXPECT_EQ(State(t), CliqueState::kWaiting);
  EXPECT_EQ(nccl_->live_comms(), 1);  // only the dead process's own communicator

  const CliqueKey new_key = Key({0, 1, 0, 0});
  Restart(1, new_key);
  for (int t : {0, 2, 3}) managers_[t]->OnMembershipChange({{{0, 0}, {1, 1}, {2, 0}, {3, 0}}});
  PollAll();
  for (int t = 0; t < kTasks; ++t) {
    EXPECT_EQ(State(t), CliqueState::kReady);
    EXPECT_EQ(Info(t).key, new_key);
  }
}

TEST_F(CliqueManagerTest, UnrelatedMembershipChange_LeavesTheCliqueAlone) {
  Init();
  FormAll();
  managers_[0]->OnMembershipChange({{{0, 0}, {1, 0}, {2, 0}, {3, 0}, {7, 5}}});
  EXPECT_EQ(State(0), CliqueState::kReady);
  EXPECT_EQ(nccl_->counts().revokes, 0);
}

TEST_F(CliqueManagerTest, InitDeadline_AbortsTheComm_AndFailsWithDeadlineExceeded) {
  Init();
  nccl_->SetInitsNeverComplete(true);
  AcquireAll(Key({0, 0, 0, 0}), {3, 2, 1, 0}, absl::Seconds(10));
  PollAll();
  clock_.Advance(absl::Seconds(9));
  PollAll();
  for (int t = 0; t < kTasks; ++t) EXPECT_EQ(State(t), CliqueState::kForming);

  clock_.Advance(absl::Seconds(1));
  PollAll();

  for (int t = 0; t < kTasks; ++t) {
    SCOPED_TRACE(t);
    EXPECT_EQ(State(t), CliqueState::kFailed);
    EXPECT_THAT(Info(t).status, StatusIs(absl::StatusCode::kDeadlineExceeded,
                                         HasSubstr("NCCL init still in progress")));
    EXPECT_EQ(managers_[t]->counters().init_timeouts, 1);
  }
  EXPECT_EQ(nccl_->live_comms(), 0);
  EXPECT_EQ(nccl_->counts().aborts, 4);
}

TEST_F(CliqueManagerTest, InitDeadline_WhenRankZeroNeverPublishes_SaysSo) {
  Init();
  AcquireAll(Key({0, 0, 0, 0}), {1}, absl::Seconds(5));
  clock_.Advance(absl::Seconds(5));
  PollAll();
  EXPECT_EQ(State(1), CliqueState::kFailed);
  EXPECT_THAT(Info(1).status, StatusIs(absl::StatusCode::kDeadlineExceeded,
                                       HasSubstr("never published the unique id under nccl/job/")));
}

TEST_F(CliqueManagerTest, InitDeadline_WithAttemptsLeft_RetriesUnderANewUniqueIdKey) {
  CliqueManager::Options options;
  options.reform_timeout = absl::Seconds(20);
  options.max_init_attempts = 2;
  Init({}, options);
  nccl_->SetInitsNeverComplete(true);
  AcquireAll(Key({0, 0, 0, 0}), {3, 2, 1, 0}, absl::Seconds(10));
  PollAll(1);  // every rank's first init is stuck
  nccl_->SetInitsNeverComplete(false);
  clock_.Advance(absl::Seconds(10));
  PollAll(1);
  for (int t = 0; t < kTasks; ++t) {
    EXPECT_EQ(State(t), CliqueState::kForming);
    EXPECT_EQ(Info(t).attempt, 1);
    EXPECT_THAT(Info(t).status, StatusIs(absl::StatusCode::kDeadlineExceeded));
  }
  PollAll();
  for (int t = 0; t < kTasks; ++t) EXPECT_EQ(State(t), CliqueState::kReady);
  EXPECT_EQ(exchange_.published(), 2);
}

TEST_F(CliqueManagerTest, FailedClique_AcquiredAgain_FormsUnderTheNextAttempt) {
  Init();
  nccl_->SetInitsNeverComplete(true);
  AcquireAll(Key({0, 0, 0, 0}), {3, 2, 1, 0}, absl::Seconds(1));
  clock_.Advance(absl::Seconds(1));
  PollAll();
  nccl_->SetInitsNeverComplete(false);
  std::vector<CliqueId> first = ids_;
  AcquireAll(Key({0, 0, 0, 0}));
  PollAll();
  for (int t = 0; t < kTasks; ++t) {
    EXPECT_EQ(ids_[t], first[t]);
    EXPECT_EQ(State(t), CliqueState::kReady);
  }
}

TEST_F(CliqueManagerTest, AsyncErrorOnAReadyClique_AbortsItsComm) {
  Init();
  FormAll();
  CommHandle comm = Info(1).comm;
  nccl_->InjectAsyncError(comm, absl::UnavailableError("ncclRemoteError: peer 3 unreachable"));

  PollAll(1);

  EXPECT_EQ(State(1), CliqueState::kFailed);
  EXPECT_THAT(Info(1).status, StatusIs(absl::StatusCode::kUnavailable, HasSubstr("peer 3")));
  EXPECT_TRUE(nccl_->Info(comm)->freed);
  EXPECT_EQ(managers_[1]->counters().async_errors, 1);
  EXPECT_EQ(managers_[1]->counters().aborts, 1);
  EXPECT_EQ(State(0), CliqueState::kReady);
}

TEST_F(CliqueManagerTest, PublishRejected_FailsRankZero_WithTheExchangeError) {
  Init();
  const CliqueKey key = Key({0, 0, 0, 0});
  NcclUniqueId other;
  other.bytes[0] = 'x';
  ASSERT_THAT(exchange_.Publish(key.KvPrefix() + "/id0", other), IsOk());
  AcquireAll(key, {0});
  EXPECT_EQ(State(0), CliqueState::kFailed);
  EXPECT_THAT(Info(0).status,
              StatusIs(absl::StatusCode::kAlreadyExists, HasSubstr("publishing the unique id")));
  EXPECT_EQ(nccl_->live_comms(), 0);
}

TEST_F(CliqueManagerTest, Callbacks_RunOutsideTheLock_SoTheyMayCallBackIntoTheManager) {
  std::vector<std::pair<CliqueState, CliqueState>> seen;
  CliqueManager* self = nullptr;
  CliqueManager::Options options;
  options.on_state_change = [&](const CliqueInfo& clique, CliqueState old_state,
                                CliqueState new_state, const absl::Status&) {
    // Deadlocks (absl::Mutex is not reentrant) if the manager still held its lock.
    auto now = self->Get(clique.id);
    ASSERT_THAT(now, IsOk());
    EXPECT_EQ(now->state, new_state);
    self->counters();
    seen.emplace_back(old_state, new_state);
  };
  Init({}, options);
  self = managers_[0].get();
  managers_[1] = nullptr;
  managers_[2] = nullptr;
  managers_[3] = nullptr;
  // A one-rank clique on task 0, then the membership changes under it.
  CliqueKey solo = Key({0}, {0});
  auto id = self->Acquire(solo, 0, clock_.Now() + absl::Seconds(5));
  ASSERT_THAT(id, IsOk());
  ids_[0] = *id;
  PollAll();
  self->OnMembershipChange({{{0, 0}, {5, 1}}});  // unrelated: no transition
  nccl_->InjectAsyncError(Info(0).comm, absl::InternalError("boom"));
  PollAll();

  EXPECT_THAT(seen, ElementsAre(Pair(CliqueState::kForming, CliqueState::kReady),
                                Pair(CliqueState::kReady, CliqueState::kFailed)));
}

TEST_F(CliqueManagerTest, Release_DestroysAReadyComm_AndForgetsTheClique) {
  Init();
  FormAll();
  CommHandle comm = Info(0).comm;
  ASSERT_THAT(managers_[0]->Release(ids_[0]), IsOk());
  EXPECT_TRUE(nccl_->Info(comm)->freed);
  EXPECT_EQ(nccl_->counts().destroys, 1);
  EXPECT_THAT(managers_[0]->Get(ids_[0]), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(managers_[0]->Release(ids_[0]), StatusIs(absl::StatusCode::kNotFound));
}

TEST_F(CliqueManagerTest, Destruction_AbortsEveryLiveComm) {
  Init();
  FormAll();
  managers_.clear();
  EXPECT_EQ(nccl_->live_comms(), 0);
}

}  // namespace
}  // namespace phalanx::clique
