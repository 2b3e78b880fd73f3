// A coordinator that stops, moves or restarts never fails a task (issue 13): the real
// phalanx-coordinator as a separate process on 127.0.0.1, stopped with real signals and started
// again on the same port, against clients in this process and phalanx-sample-worker processes.
// One test per row of docs/coordination.md "What a coordinator restart loses" that has
// behaviour to assert.
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <optional>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/testing/eventually.h"
#include "common/testing/status_matchers.h"
#include "examples/local_job/local_job.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace phalanx::harness {
namespace {

using ::phalanx::testing::Eventually;
using ::phalanx::testing::IsOk;
using ::phalanx::testing::StatusIs;

// Generous for a loaded 2-core machine; nothing here asserts a speed.
constexpr absl::Duration kTimeout = absl::Seconds(60);
// Far longer than any wait below: a blocking call that returns within kTimeout did not wait
// out its own timeout.
constexpr absl::Duration kCallTimeout = absl::Seconds(600);

class CoordinatorRestart : public ::testing::Test {
 protected:
  std::string WorkDir() const {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    return std::filesystem::temp_directory_path() /
           absl::StrCat("phalanx-restart-", ::getpid(), "-", info->name());
  }
  void TearDown() override {
    if (HasFailure()) {
      std::fprintf(stderr, "logs kept in %s\n", WorkDir().c_str());
      return;
    }
    std::error_code ec;
    std::filesystem::remove_all(WorkDir(), ec);
  }

  LocalJobOptions Options(int num_tasks, bool start_workers) const {
    LocalJobOptions options;
    // PHALANX_TEST_BIN_DIR runs the same tests against other binaries (e.g. an older build's,
    // to see what a test catches).
    const char* bin_dir = std::getenv("PHALANX_TEST_BIN_DIR");
    options.bin_dir = bin_dir != nullptr ? bin_dir : PHALANX_BUILD_DIR;
    options.work_dir = WorkDir();
    std::filesystem::remove_all(options.work_dir);
    options.num_tasks = num_tasks;
    options.start_workers = start_workers;
    options.echo = std::getenv("PHALANX_TEST_ECHO") != nullptr;
    return options;
  }
};

// A task played by this process: its client and what its reconnect callback saw.
struct Task {
  std::atomic<int> reconnects{0};
  std::atomic<int> restarted_reconnects{0};
  std::unique_ptr<client::CoordinationClientImpl> client;
};

std::unique_ptr<Task> ConnectTask(LocalJob& job, int task_id,
                                  std::function<void(Task&)> on_restart = nullptr) {
  auto task = std::make_unique<Task>();
  client::ClientConfig config;
  config.coordinator = job.address();
  config.job = job.options().job;
  config.task_id = task_id;
  config.num_tasks = job.options().num_tasks;
  config.token = job.options().token;
  client::ClientCallbacks callbacks;
  Task* raw = task.get();
  callbacks.on_reconnect = [raw, on_restart](bool coordinator_restarted) {
    if (coordinator_restarted) {
      if (on_restart) on_restart(*raw);
      ++raw->restarted_reconnects;
    }
    ++raw->reconnects;
  };
  auto created = client::CoordinationClientImpl::Create(config, std::move(callbacks));
  EXPECT_THAT(created, IsOk());
  task->client = *std::move(created);
  EXPECT_THAT(task->client->Connect(kTimeout), IsOk());
  return task;
}

// Runs `call` on its own thread; `result()` is its status once it returned.
class InFlight {
 public:
  explicit InFlight(std::function<absl::Status()> call)
      : thread_([this, call = std::move(call)] {
          absl::Status status = call();
          absl::MutexLock lock(&mu_);
          result_ = std::move(status);
        }) {}
  ~InFlight() { thread_.join(); }
  std::optional<absl::Status> result() {
    absl::MutexLock lock(&mu_);
    return result_;
  }

 private:
  absl::Mutex mu_;
  std::optional<absl::Status> result_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

// Rows "barriers in flight", "blocking gets", "alive-task agreements", "registrations and
// sessions": every blocking call in flight when the coordinator is SIGTERMed returns
// Unavailable (the old coordinator answered Cancelled, which the sample programs took as fatal)
// without waiting out its timeout; the tasks re-register with the coordinator started on the
// same port, hear on_reconnect(coordinator_restarted=true), and the retried calls complete.
void BlockingCallsInFlight_AllGetUnavailable_ThenRetryCompletes(LocalJobOptions options,
                                                                int signal) {
  auto job = LocalJob::Start(std::move(options));
  ASSERT_THAT(job, IsOk());
  auto t0 = ConnectTask(**job, 0);
  auto t1 = ConnectTask(**job, 1);
  auto t2 = ConnectTask(**job, 2);
  // Task 2 never joins these, so each stays in flight until the coordinator goes.
  auto barrier = std::make_unique<InFlight>([&] {
    return t0->client->Barrier("step-7", kCallTimeout, {0, 2});
  });
  auto alive = std::make_unique<InFlight>([&] {
    return t1->client->GetAliveTasks({1, 2}, kCallTimeout).status();
  });
  auto get = std::make_unique<InFlight>(
      [&] { return t2->client->KvGet("never/set", kCallTimeout).status(); });
  // Give the calls a moment to reach the coordinator. The outcome does not depend on it (a
  // call that arrives while it stops, or after, is Unavailable too); it makes the test see the
  // calls the coordinator was holding, which is where the old code answered Cancelled.
  absl::SleepFor(absl::Milliseconds(500));
  ASSERT_FALSE(barrier->result().has_value()) << barrier->result()->ToString();
  ASSERT_FALSE(alive->result().has_value()) << alive->result()->ToString();
  ASSERT_FALSE(get->result().has_value()) << get->result()->ToString();
  ASSERT_THAT((*job)->StopCoordinator(signal), IsOk());

  for (auto [name, pending] :
       {std::pair{"barrier", barrier.get()}, std::pair{"alive_tasks", alive.get()},
        std::pair{"blocking get", get.get()}}) {
    auto* call = pending;  // clang 14 cannot capture a structured binding in a lambda
    ASSERT_TRUE(Eventually([&] { return call->result().has_value(); }, kTimeout))
        << name << " waited past the coordinator's exit";
    EXPECT_THAT(*call->result(), StatusIs(absl::StatusCode::kUnavailable)) << name;
  }

  ASSERT_THAT((*job)->StartNewCoordinator(), IsOk());
  for (Task* t : {t0.get(), t1.get(), t2.get()}) {
    ASSERT_THAT(t->client->WaitUntilConnected(kTimeout), IsOk());
    EXPECT_TRUE(Eventually([&] { return t->restarted_reconnects.load() == 1; }, kTimeout));
    EXPECT_EQ(t->client->task().incarnation, 0u) << "the same incarnation re-registers";
  }
  // The retries: the same calls, now with task 2 taking part, complete.
  barrier = std::make_unique<InFlight>([&] {
    return t0->client->Barrier("step-7", kCallTimeout, {0, 2});
  });
  alive = std::make_unique<InFlight>([&] {
    return t1->client->GetAliveTasks({1, 2}, kCallTimeout).status();
  });
  get = std::make_unique<InFlight>(
      [&] { return t2->client->KvGet("never/set", kCallTimeout).status(); });
  EXPECT_THAT(t2->client->Barrier("step-7", kTimeout, {0, 2}), IsOk());
  EXPECT_THAT(t2->client->GetAliveTasks({1, 2}, kTimeout), IsOk());
  EXPECT_THAT(t0->client->KvInsert("never/set", "now", false), IsOk());
  for (auto* call : {barrier.get(), alive.get(), get.get()}) {
    ASSERT_TRUE(Eventually([&] { return call->result().has_value(); }, kTimeout));
    EXPECT_THAT(*call->result(), IsOk());
  }
}

TEST_F(CoordinatorRestart, SigtermWithBlockingCallsInFlight_AllGetUnavailable_ThenRetryCompletes) {
  BlockingCallsInFlight_AllGetUnavailable_ThenRetryCompletes(Options(3, false), SIGTERM);
}

// The same for a coordinator that crashes (or whose node vanishes with its process): the
// connection breaks, and the calls end at once rather than at their timeouts.
TEST_F(CoordinatorRestart, SigkillWithBlockingCallsInFlight_AllGetUnavailable_ThenRetryCompletes) {
  BlockingCallsInFlight_AllGetUnavailable_ThenRetryCompletes(Options(3, false), SIGKILL);
}

// Row "key-value data": a restart loses every key (the new coordinator starts empty); a task
// that re-publishes its keys from on_reconnect(coordinator_restarted=true) is seen by its peers.
TEST_F(CoordinatorRestart, KeyValueData_IsLost_AndARepublishOnReconnectIsSeenByPeers) {
  auto job = LocalJob::Start(Options(2, /*start_workers=*/false));
  ASSERT_THAT(job, IsOk());
  auto publisher = ConnectTask(**job, 0, [](Task& t) {
    // On the session thread: the non-blocking form only.
    t.client->KvInsertAsync("addr/0", "10.0.0.1:1234", true, [](absl::Status) {});
  });
  auto reader = ConnectTask(**job, 1);
  ASSERT_THAT(publisher->client->KvInsert("addr/0", "10.0.0.1:1234", false), IsOk());
  ASSERT_THAT(publisher->client->KvInsert("scratch/not-republished", "x", false), IsOk());
  ASSERT_THAT(reader->client->KvGet("addr/0", kTimeout), IsOk());

  ASSERT_THAT((*job)->RestartCoordinator(SIGTERM), IsOk());
  ASSERT_THAT(reader->client->WaitUntilConnected(kTimeout), IsOk());
  EXPECT_THAT(reader->client->KvTryGet("scratch/not-republished"),
              StatusIs(absl::StatusCode::kNotFound))
      << "key-value data lives only in the coordinator's memory";
  absl::StatusOr<std::string> addr = reader->client->KvGet("addr/0", kTimeout);
  ASSERT_THAT(addr, IsOk());
  EXPECT_EQ(*addr, "10.0.0.1:1234");
  // The callback counts after it republished, so the value can be seen a moment before.
  EXPECT_TRUE(Eventually([&] { return publisher->restarted_reconnects.load() == 1; }, kTimeout));
}

// The sample worker: SIGTERM the coordinator mid-training (a pod eviction), start its successor
// on the same port; every worker reconnects, recovers and finishes with exit 0 in its first
// incarnation (no restart spent).
TEST_F(CoordinatorRestart, SampleWorkers_SurviveASigtermedCoordinatorAndItsSuccessor) {
  LocalJobOptions options = Options(3, /*start_workers=*/true);
  options.worker_args = {"--steps=80", "--step_time=20ms", "--checkpoint_every=5"};
  auto started = LocalJob::Start(options);
  ASSERT_THAT(started, IsOk());
  LocalJob& job = **started;
  for (int task = 0; task < 3; ++task) {
    ASSERT_TRUE(job.WaitForEvent(task, "checkpoint", kTimeout, [](const WorkerEvent& e) {
      return e.Int("step") >= 10;
    })) << job.Describe();
  }
  ASSERT_THAT(job.StopCoordinator(SIGTERM), IsOk());
  // The outage lasts a while, as a pod being rescheduled does; the workers must wait it out.
  absl::SleepFor(absl::Seconds(2));
  ASSERT_THAT(job.StartNewCoordinator(), IsOk());
  for (int task = 0; task < 3; ++task) {
    auto reconnected = job.WaitForEvent(task, "reconnected", kTimeout);
    ASSERT_TRUE(reconnected.has_value()) << "task " << task << "\n" << job.Describe();
    EXPECT_EQ(reconnected->Int("coordinator_restarted"), 1);
  }
  EXPECT_TRUE(job.WaitAllExited(absl::Seconds(120))) << job.Describe();
  for (int task = 0; task < 3; ++task) {
    EXPECT_TRUE(job.WaitForEvent(task, "done", absl::Seconds(1)).has_value())
        << "task " << task << "\n"
        << job.Describe();
    EXPECT_EQ(job.incarnation(task), 0u) << "nobody needed a restart";
  }
}

}  // namespace
}  // namespace phalanx::harness
