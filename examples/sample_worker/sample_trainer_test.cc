#include "examples/sample_worker/sample_trainer.h"

#include <unistd.h>

#include <filesystem>
#include <map>
#include <mutex>
#include <optional>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace phalanx::examples {
namespace {

using ::phalanx::testing::IsOk;
using ::testing::Contains;

// Task 0 of a two-task job, played against a scripted coordinator: every barrier passes at
// once, recovery sees both tasks connected, and a preemption round has agreed on
// `sync_step`. The peer (task 1) is the task the round names: it checkpoints at the sync
// step and leaves, so its failure reaches task 0 right after the barrier of the step before
// (the peer passed that barrier too) and before task 0's loop checks the sync step, which
// is what a loaded machine does to the real processes. After the failure the peer's next
// incarnation is back and publishes its checkpoint, the sync step.
class ScriptedClient final : public client::CoordinationClient {
 public:
  ScriptedClient(client::ClientCallbacks callbacks, int64_t sync_step)
      : callbacks_(std::move(callbacks)), sync_step_(sync_step) {}

  std::vector<int64_t> sync_checks;    // the steps ReachedSyncPoint was asked about
  std::vector<std::string> published;  // this task's recovery entries, in order
  // The coordinator going away: the first barrier whose id ends in `unavailable_barrier`, and
  // the first `unavailable_shutdowns` shutdown barriers, fail with Unavailable, as a stopping
  // or restarting coordinator answers.
  std::string unavailable_barrier;
  // With it: that Unavailable is the coordinator dying as it released the barrier. The peer got
  // the release, checkpointed at the sync step and left; a successor coordinator took over.
  bool release_lost_with_the_coordinator = false;
  int unavailable_shutdowns = 0;
  int shutdown_calls = 0;
  // The step the peer's replacement publishes (default: the sync step, so nothing is lost),
  // and the rolled-back reports this task made.
  std::optional<int64_t> peer_checkpoint;
  std::optional<std::string> peer_offer;  // what the peer publishes instead, verbatim
  std::vector<std::pair<std::string, absl::Duration>> rolled_back;

  absl::Status ReportRolledBack(const std::string& recovery, absl::Duration d) override {
    rolled_back.emplace_back(recovery, d);
    return absl::OkStatus();
  }

  client::TaskRef task() const override { return {0, 0}; }
  int num_tasks() const override { return 2; }
  absl::Status Connect(absl::Duration) override { return absl::OkStatus(); }
  absl::Status WaitUntilConnected(absl::Duration) override { return absl::OkStatus(); }
  bool connected() const override { return true; }

  void BarrierAsync(const std::string& id, absl::Duration, const std::vector<int>&,
                    absl::AnyInvocable<void(absl::Status) &&> done) override {
    if (!unavailable_barrier.empty() && absl::EndsWith(id, unavailable_barrier)) {
      unavailable_barrier.clear();
      if (release_lost_with_the_coordinator) {
        peer_left_ = true;
        peer_latest_ = sync_step_;
        coordinator_id_ = "successor";
      }
      std::move(done)(absl::UnavailableError("coordinator is shutting down; retry"));
      return;
    }
    const bool peer_leaves =
        !peer_left_ && absl::EndsWith(id, absl::StrCat("/step-", sync_step_ - 1));
    std::move(done)(absl::OkStatus());
    if (peer_leaves) {
      // The peer passed this barrier with us, checkpointed at the sync step and left.
      peer_left_ = true;
      peer_latest_ = peer_checkpoint.value_or(sync_step_);
      callbacks_.on_peer_change(client::TaskInfo{1, 0, client::TaskState::kFailed,
                                                 "session broken: stream closed by the task"});
    }
  }
  void CancelBarrierAsync(const std::string&,
                          absl::AnyInvocable<void(absl::Status) &&> done) override {
    std::move(done)(absl::OkStatus());
  }
  absl::StatusOr<bool> ReachedSyncPoint(int64_t step) override {
    sync_checks.push_back(step);
    if (step != sync_step_ || sync_answered_) return false;
    sync_answered_ = true;
    return true;
  }
  absl::StatusOr<client::JobSnapshot> WatchJobState(uint64_t, absl::Duration) override {
    // The peer's replacement (incarnation 1) is connected again by the time we recover.
    client::JobSnapshot snapshot{"job", 1, {}, coordinator_id_};
    snapshot.tasks.push_back({0, 0, client::TaskState::kConnected, "", absl::InfinitePast()});
    snapshot.tasks.push_back(
        {1, peer_left_ ? 1u : 0u, client::TaskState::kConnected, "", absl::InfinitePast()});
    return snapshot;
  }
  absl::Status KvInsert(const std::string& key, const std::string& value, bool) override {
    kv_[key] = value;
    published.push_back(value);
    return absl::OkStatus();
  }
  absl::StatusOr<std::vector<std::pair<std::string, std::string>>> KvGetDir(
      const std::string& directory) override {
    std::vector<std::pair<std::string, std::string>> entries;
    entries.emplace_back(directory + "/0", kv_[directory + "/0"]);
    entries.emplace_back(directory + "/1", peer_offer.value_or(absl::StrCat(peer_latest_)));
    return entries;
  }
  absl::Status Shutdown(absl::Duration) override {
    if (shutdown_calls++ < unavailable_shutdowns) {
      return absl::UnavailableError("coordinator is shutting down; retry");
    }
    return absl::OkStatus();
  }

  // Not used by the trainer in this script.
  absl::Status Barrier(const std::string&, absl::Duration, const std::vector<int>&) override {
    return Unused();
  }
  absl::Status CancelBarrier(const std::string&) override { return Unused(); }
  absl::StatusOr<std::string> KvGet(const std::string&, absl::Duration) override {
    return Unused();
  }
  void KvInsertAsync(const std::string&, const std::string&, bool,
                     absl::AnyInvocable<void(absl::Status) &&> done) override {
    std::move(done)(Unused());
  }
  void KvGetAsync(const std::string&, absl::Duration,
                  absl::AnyInvocable<void(absl::StatusOr<std::string>) &&> done) override {
    std::move(done)(Unused());
  }
  absl::StatusOr<std::string> KvTryGet(const std::string&) override { return Unused(); }
  absl::StatusOr<int> KvDelete(const std::string&) override { return Unused(); }
  absl::Status ReportError(const std::string&) override { return Unused(); }
  absl::StatusOr<std::vector<client::TaskRef>> GetAliveTasks(const std::vector<int>&,
                                                             absl::Duration) override {
    return Unused();
  }
  absl::StatusOr<client::PreemptionRound> NotifyPreemption(
      const client::PreemptionNotice&) override {
    return Unused();
  }

 private:
  static absl::Status Unused() { return absl::UnimplementedError("not in this script"); }

  client::ClientCallbacks callbacks_;
  const int64_t sync_step_;
  bool peer_left_ = false;
  bool sync_answered_ = false;
  int64_t peer_latest_ = 0;
  std::string coordinator_id_ = "coordinator";
  std::map<std::string, std::string> kv_;
};

TEST(SampleTrainer, PeerLeavingAtTheSyncStep_StillCheckpointsThereBeforeRecovering) {
  const std::string dir =
      std::filesystem::temp_directory_path() / absl::StrCat("phalanx-trainer-test-", ::getpid());
  std::filesystem::remove_all(dir);
  constexpr int64_t kSyncStep = 3;
  TrainerOptions options;
  options.steps = 5;
  options.step_time = absl::ZeroDuration();
  options.checkpoint_every = 100;  // only the sync checkpoint and the last step's
  options.checkpoint_dir = dir;
  SampleTrainer trainer(options, {0, 0});
  ScriptedClient client(trainer.Callbacks(), kSyncStep);

  ASSERT_THAT(trainer.Run(client), IsOk());

  // The sync step was checked (and checkpointed) although the peer's failure was already
  // known when the loop got there; recovery then resumed from it, losing nothing.
  EXPECT_THAT(client.sync_checks, Contains(kSyncStep));
  EXPECT_THAT(CheckpointStore(dir, 0).Load(kSyncStep), IsOk());
  EXPECT_THAT(client.published, Contains(absl::StrCat("held=0,", kSyncStep)))
      << "after the peer left, this task must offer the sync step's checkpoint";
  EXPECT_TRUE(client.rolled_back.empty()) << "resuming where it was discards nothing";
  std::filesystem::remove_all(dir);
}

TEST(SampleTrainer, ABarrierReleaseLostWithTheCoordinator_IsProvenByThePeersCheckpoint) {
  // The coordinator died the moment it released the barrier before the sync step: the peer got
  // the release, checkpointed at the sync step and left; this task's barrier ended Unavailable.
  // The simple rule (smallest newest checkpoint) would roll both back to step 0; the peer's
  // checkpoint proves the release, so this task resumes at the sync step with the state it
  // computed for it, and nothing is lost.
  const std::string dir = std::filesystem::temp_directory_path() /
                          absl::StrCat("phalanx-trainer-release-lost-", ::getpid());
  std::filesystem::remove_all(dir);
  constexpr int64_t kSyncStep = 3;
  TrainerOptions options;
  options.steps = 5;
  options.step_time = absl::Milliseconds(5);
  options.checkpoint_every = 100;
  options.checkpoint_dir = dir;
  SampleTrainer trainer(options, {0, 0});
  ScriptedClient client(trainer.Callbacks(), kSyncStep);
  client.unavailable_barrier = absl::StrCat("/step-", kSyncStep - 1);
  client.release_lost_with_the_coordinator = true;

  ASSERT_THAT(trainer.Run(client), IsOk());

  EXPECT_THAT(client.published,
              Contains(absl::StrCat("held=0,", kSyncStep - 1, " pending=", kSyncStep)));
  EXPECT_TRUE(client.rolled_back.empty()) << "nothing was rolled back";
  // The state it kept for the sync step is the one training from scratch reaches.
  uint64_t expected = 0;
  for (int64_t step = 0; step < kSyncStep; ++step) expected = AdvanceState(expected, step);
  absl::StatusOr<uint64_t> kept = CheckpointStore(dir, 0).Load(kSyncStep);
  ASSERT_THAT(kept, IsOk());
  EXPECT_EQ(*kept, expected);
  EXPECT_THAT(CheckpointStore(dir, 0).Load(options.steps), IsOk()) << "it trained to the end";
  std::filesystem::remove_all(dir);
}

TEST(SampleTrainer, AGarbledPeerOffer_EndsRecoveryWithAClearErrorNotARetryLoop) {
  const std::string dir =
      std::filesystem::temp_directory_path() / absl::StrCat("phalanx-trainer-garbled-", ::getpid());
  std::filesystem::remove_all(dir);
  TrainerOptions options;
  options.checkpoint_dir = dir;
  SampleTrainer trainer(options, {0, 0});
  ScriptedClient client(trainer.Callbacks(), /*sync_step=*/1000);
  client.peer_offer = "held=0,ten";

  const absl::Status status = trainer.Run(client);

  EXPECT_TRUE(absl::IsFailedPrecondition(status)) << status;
  EXPECT_THAT(status.message(), ::testing::HasSubstr("'ten' is not a step"));
  EXPECT_EQ(client.published.size(), 1u) << "read once, not retried until the deadline";
  std::filesystem::remove_all(dir);
}

TEST(SampleTrainer, ARollbackReportsTheWorkItDiscardedOnce) {
  const std::string dir = std::filesystem::temp_directory_path() /
                          absl::StrCat("phalanx-trainer-rollback-", ::getpid());
  std::filesystem::remove_all(dir);
  TrainerOptions options;
  options.steps = 5;
  options.step_time = absl::Milliseconds(20);
  options.checkpoint_every = 100;
  options.checkpoint_dir = dir;
  SampleTrainer trainer(options, {0, 0});
  ScriptedClient client(trainer.Callbacks(), /*sync_step=*/3);
  client.peer_checkpoint = 0;  // the peer's replacement has nothing: all resume from step 0

  ASSERT_THAT(trainer.Run(client), IsOk());

  // Steps 0-3 were run and thrown away: at least their compute time, reported once.
  ASSERT_EQ(client.rolled_back.size(), 1u);
  EXPECT_FALSE(client.rolled_back[0].first.empty());
  EXPECT_GE(client.rolled_back[0].second, 3 * options.step_time);
  std::filesystem::remove_all(dir);
}

TEST(SampleTrainer, CoordinatorGoingAway_IsRetriedNeverAFailure) {
  // A step barrier and the shutdown barrier meet a stopping coordinator (Unavailable) while the
  // membership is unchanged: the task re-runs recovery, re-enters the barriers and finishes
  // (issue 13: a coordinator restart must never fail a task).
  const std::string dir = std::filesystem::temp_directory_path() /
                          absl::StrCat("phalanx-trainer-unavailable-", ::getpid());
  std::filesystem::remove_all(dir);
  TrainerOptions options;
  options.steps = 6;
  options.step_time = absl::ZeroDuration();
  options.checkpoint_every = 2;
  options.checkpoint_dir = dir;
  SampleTrainer trainer(options, {0, 0});
  ScriptedClient client(trainer.Callbacks(), /*sync_step=*/1000);  // no preemption round
  client.unavailable_barrier = "/step-3";
  client.unavailable_shutdowns = 2;

  ASSERT_THAT(trainer.Run(client), IsOk());

  EXPECT_EQ(client.shutdown_calls, 3) << "the shutdown barrier is re-entered after Unavailable";
  EXPECT_GE(client.published.size(), 2u) << "Unavailable sends the task through recovery";
  EXPECT_THAT(CheckpointStore(dir, 0).Load(6), IsOk()) << "it trained to the last step";
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace phalanx::examples
