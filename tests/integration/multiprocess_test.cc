// Multi-process tests: the real phalanx-coordinator and phalanx-sample-worker binaries as
// separate processes on 127.0.0.1, with real signals.
#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <optional>
#include <set>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/testing/eventually.h"
#include "common/testing/http_get.h"
#include "common/testing/status_matchers.h"
#include "examples/local_job/local_job.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace phalanx::harness {
namespace {

using ::phalanx::testing::IsOk;
using ::testing::HasSubstr;

constexpr absl::Duration kTimeout = absl::Seconds(60);

std::string WorkDir() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::string dir = std::filesystem::temp_directory_path() /
                    absl::StrCat("phalanx-mp-", ::getpid(), "-", info->name());
  std::filesystem::remove_all(dir);
  return dir;
}

// Keeps a test's work dir (logs, checkpoints) only when the test failed.
class MultiProcess : public ::testing::Test {
 protected:
  void TearDown() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    const std::filesystem::path dir = std::filesystem::temp_directory_path() /
                                      absl::StrCat("phalanx-mp-", ::getpid(), "-", info->name());
    if (HasFailure()) {
      std::fprintf(stderr, "logs kept in %s\n", dir.c_str());
      return;
    }
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
};

LocalJobOptions Options(int num_tasks, int steps) {
  LocalJobOptions options;
  options.bin_dir = PHALANX_BUILD_DIR;
  options.work_dir = WorkDir();
  options.num_tasks = num_tasks;
  options.echo = std::getenv("PHALANX_TEST_ECHO") != nullptr;  // debugging aid
  options.worker_args = {absl::StrCat("--steps=", steps), "--step_time=20ms",
                         "--checkpoint_every=5"};
  return options;
}

std::unique_ptr<LocalJob> StartJob(LocalJobOptions options) {
  auto job = LocalJob::Start(std::move(options));
  EXPECT_THAT(job, IsOk());
  return *std::move(job);
}

// The port a ready line names after `label` (e.g. "metrics=127.0.0.1:"), up to the next space.
std::optional<int> PortAfter(const std::string& line, const std::string& label) {
  const size_t at = line.find(label);
  if (at == std::string::npos) return std::nullopt;
  const size_t start = at + label.size();
  int port = 0;
  if (!absl::SimpleAtoi(line.substr(start, line.find(' ', start) - start), &port)) {
    return std::nullopt;
  }
  return port;
}

// Waits until every task has passed `step` (its periodic checkpoint at that step).
void WaitForCheckpoint(LocalJob& job, int64_t step) {
  for (int task = 0; task < job.options().num_tasks; ++task) {
    ASSERT_TRUE(job.WaitForEvent(task, "checkpoint", kTimeout,
                                 [&](const WorkerEvent& e) { return e.Int("step") >= step; }))
        << "task " << task << " never reached step " << step << "\n"
        << job.Describe();
  }
}

TEST_F(MultiProcess, KilledWorker_EverySurvivorLearnsWhichTaskDied_AndJobFinishes) {
  auto job = StartJob(Options(4, 60));
  WaitForCheckpoint(*job, 10);
  job->worker(2).Signal(SIGKILL);
  for (int survivor : {0, 1, 3}) {
    auto told = job->WaitForEvent(survivor, "peer_failed", kTimeout);
    ASSERT_TRUE(told.has_value()) << "task " << survivor << " was never told";
    EXPECT_EQ(told->Int("peer"), 2);
    EXPECT_THAT(told->fields["reason"], HasSubstr("session broken"));
  }
  ASSERT_THAT(job->StartWorker(2), IsOk());
  auto resumed = job->WaitForEvent(2, "start", kTimeout,
                                   [](const WorkerEvent& e) { return e.incarnation == 1; });
  ASSERT_TRUE(resumed.has_value());
  EXPECT_GE(resumed->Int("resume_step"), 10) << "the restarted task must resume from a checkpoint";
  // The barriers after the restart complete with the new incarnation: everybody finishes.
  EXPECT_TRUE(job->WaitAllExited(kTimeout));
  std::set<std::string> final_states;
  for (int task = 0; task < 4; ++task) {
    auto done = job->WaitForEvent(task, "done", absl::Seconds(1));
    ASSERT_TRUE(done.has_value());
    EXPECT_EQ(done->Int("steps"), 60);
    final_states.insert(done->fields["state"]);
  }
  EXPECT_EQ(final_states.size(), 1u) << "every task must end with the same model state";
}

TEST_F(MultiProcess, StoppedWorker_IsCaughtByHeartbeatTimeout) {
  LocalJobOptions options = Options(3, 400);
  options.heartbeat_timeout = absl::Seconds(1);
  auto job = StartJob(options);
  WaitForCheckpoint(*job, 5);
  job->worker(1).Signal(SIGSTOP);
  for (int survivor : {0, 2}) {
    auto told = job->WaitForEvent(survivor, "peer_failed", kTimeout);
    ASSERT_TRUE(told.has_value());
    EXPECT_EQ(told->Int("peer"), 1);
    EXPECT_THAT(told->fields["reason"], HasSubstr("heartbeat timeout"));
  }
  // When it wakes up it learns it was declared failed and exits (code 3) for a restart.
  job->worker(1).Signal(SIGCONT);
  ASSERT_TRUE(job->worker(1).Wait(kTimeout).has_value());
  EXPECT_EQ(job->worker(1).ExitCode(), 3);
  ASSERT_THAT(job->StartWorker(1), IsOk());
  EXPECT_TRUE(job->WaitAllExited(absl::Seconds(120)));
}

TEST_F(MultiProcess, CoordinatorRestart_WorkersReconnectReRegisterAndFinish) {
  auto job = StartJob(Options(3, 80));
  WaitForCheckpoint(*job, 10);
  ASSERT_THAT(job->RestartCoordinator(), IsOk());
  for (int task = 0; task < 3; ++task) {
    auto reconnected = job->WaitForEvent(task, "reconnected", kTimeout);
    ASSERT_TRUE(reconnected.has_value()) << "task " << task;
    EXPECT_EQ(reconnected->Int("coordinator_restarted"), 1);
  }
  EXPECT_TRUE(job->WaitAllExited(kTimeout));
  for (int task = 0; task < 3; ++task) {
    EXPECT_TRUE(job->WaitForEvent(task, "done", absl::Seconds(1)).has_value());
    EXPECT_EQ(job->incarnation(task), 0u) << "nobody needed a restart";
  }
}

TEST_F(MultiProcess, PreemptionNotice_EveryTaskCheckpointsAtTheSameStep) {
  auto job = StartJob(Options(4, 100));
  WaitForCheckpoint(*job, 10);
  auto admin = job->AdminClient();
  ASSERT_THAT(admin->NotifyPreemption(
                  {"node n1: spot instance-action", absl::Now() + absl::Seconds(30), {3}}),
              IsOk());
  std::set<int64_t> steps;
  for (int task = 0; task < 4; ++task) {
    auto synced = job->WaitForEvent(task, "sync_checkpoint", kTimeout);
    ASSERT_TRUE(synced.has_value()) << "task " << task << "\n" << job->Describe();
    steps.insert(synced->Int("step"));
  }
  ASSERT_EQ(steps.size(), 1u) << "all tasks must checkpoint at one step";
  const int64_t sync_step = *steps.begin();
  // The task the notice names leaves at that step (exit 4: "move me"); as the operator would,
  // start its next incarnation. It resumes from the agreed step, and so does everyone else.
  auto left = job->WaitForEvent(3, "left_for_preemption", kTimeout);
  ASSERT_TRUE(left.has_value()) << job->Describe();
  EXPECT_EQ(left->Int("step"), sync_step);
  ASSERT_TRUE(job->worker(3).Wait(kTimeout).has_value());
  EXPECT_EQ(job->worker(3).ExitCode(), 4);
  ASSERT_THAT(job->StartWorker(3), IsOk());
  EXPECT_TRUE(job->WaitAllExited(kTimeout));
  auto resumed = job->WaitForEvent(3, "start", absl::Seconds(1),
                                   [](const WorkerEvent& e) { return e.incarnation == 1; });
  ASSERT_TRUE(resumed.has_value());
  EXPECT_EQ(resumed->Int("resume_step"), sync_step);
  for (int task = 0; task < 4; ++task) {
    int synced = 0, left_count = 0;
    for (const WorkerEvent& e : job->Events(task)) {
      if (e.incarnation != 0) continue;
      synced += e.kind == "sync_checkpoint";
      left_count += e.kind == "left_for_preemption";
      if (e.kind == "recovered") {
        EXPECT_EQ(e.Int("lost"), 0) << "task " << task;
      }
    }
    EXPECT_EQ(synced, 1) << "task " << task << " must checkpoint exactly once for the round";
    EXPECT_EQ(left_count, task == 3 ? 1 : 0) << "task " << task;
  }
}

TEST_F(MultiProcess, WrongToken_WorkerIsRefusedWithClearError) {
  LocalJobOptions options = Options(1, 5);
  options.start_workers = false;
  auto job = StartJob(options);
  ASSERT_THAT(job->StartWorker(0, {{"PHALANX_TOKEN", "not-the-token"}}), IsOk());
  ASSERT_TRUE(job->worker(0).Wait(kTimeout).has_value());
  EXPECT_NE(job->worker(0).ExitCode(), 0);
  // Terminal for this incarnation: reported through the client's fatal callback.
  auto failed = job->WaitForEvent(0, "fatal", absl::Seconds(1));
  ASSERT_TRUE(failed.has_value());
  EXPECT_THAT(failed->fields["reason"], HasSubstr("wrong job token"));
}

// The node agent in the loop (issue 17): a real phalanx-agent with 4 fake GPUs serves its clique
// registry on TCP; worker t reports GPU t (LOCAL_RANK). A scripted XID 79 on GPU 1 ends worker 1
// alone (exit 5, after reporting the error: its peers hear of it at once); its replacement, on
// another node's GPUs here, joins and the job finishes.
TEST_F(MultiProcess, FailedGpu_TheAgentEndsOnlyTheWorkerOnIt_WhichIsReplaced) {
  LocalJobOptions options = Options(3, 80);
  options.start_workers = false;
  const std::string xids = options.work_dir + "/xids";
  auto job = StartJob(options);
  process::SubprocessOptions agent_options;
  agent_options.argv = {PHALANX_BUILD_DIR "/node_agent/phalanx-agent",
                        "--kube=false",
                        "--notice_sources=",
                        "--node_name=n1",
                        "--fake_gpus=4",
                        "--fake_xid_file=" + xids,
                        "--poll_interval=100ms",
                        "--clique_socket=",
                        "--clique_listen=127.0.0.1:0",
                        "--metrics_listen=127.0.0.1:0"};
  agent_options.stderr_path = options.work_dir + "/agent.log";
  auto agent = process::Subprocess::Start(agent_options);
  ASSERT_THAT(agent, IsOk());
  std::optional<std::string> ready = (*agent)->WaitForLine(
      [](const std::string& line) { return line.rfind("ready ", 0) == 0; }, kTimeout);
  ASSERT_TRUE(ready.has_value());
  const std::optional<int> clique_port = PortAfter(*ready, "clique_port=");
  ASSERT_TRUE(clique_port.has_value()) << *ready;
  const std::string address = absl::StrCat("127.0.0.1:", *clique_port);
  for (int task = 0; task < 3; ++task) {
    ASSERT_THAT(job->StartWorker(task, {{"PHALANX_CLIQUE_ADDRESS", address},
                                        {"LOCAL_RANK", absl::StrCat(task)}}),
                IsOk());
  }
  WaitForCheckpoint(*job, 10);
  // The XID must find every worker in the agent's table: a worker that reports after the GPU
  // failed is not one the agent knew to be on it (each reports once at start, then every 250 ms).
  const std::optional<int> metrics_port = PortAfter(*ready, "metrics=127.0.0.1:");
  ASSERT_TRUE(metrics_port.has_value()) << *ready;
  ASSERT_TRUE(phalanx::testing::Eventually(
      [&] {
        auto metrics = phalanx::testing::HttpGet(*metrics_port, "/metrics");
        return metrics.has_value() &&
               metrics->body.find("phalanx_agent_cliques{state=\"READY\"} 3") != std::string::npos;
      },
      kTimeout))
      << "the agent never saw the three workers' cliques";
  std::ofstream(xids, std::ios::app) << "1 79\n";

  auto left = job->WaitForEvent(1, "device_failed", kTimeout);
  ASSERT_TRUE(left.has_value()) << job->Describe();
  EXPECT_THAT(left->fields["reason"], HasSubstr("XID 79"));
  ASSERT_TRUE(job->worker(1).Wait(kTimeout).has_value());
  EXPECT_EQ(job->worker(1).ExitCode(), 5);
  for (int survivor : {0, 2}) {
    auto told = job->WaitForEvent(survivor, "peer_failed", kTimeout);
    ASSERT_TRUE(told.has_value()) << "task " << survivor << "\n" << job->Describe();
    EXPECT_EQ(told->Int("peer"), 1);
    EXPECT_THAT(told->fields["reason"], HasSubstr("XID 79")) << "the peers hear why";
    EXPECT_FALSE(job->worker(survivor).ExitCode().has_value()) << "a healthy GPU's worker";
  }
  ASSERT_THAT(job->StartWorker(1), IsOk());  // elsewhere: no agent, nothing failed there
  EXPECT_TRUE(job->WaitAllExited(absl::Seconds(120))) << job->Describe();
  EXPECT_EQ(job->incarnation(0), 0u);
  EXPECT_EQ(job->incarnation(2), 0u);
}

TEST_F(MultiProcess, Coordinator_ServesMetricsAndHealth) {
  LocalJobOptions options = Options(2, 5);
  auto job = StartJob(options);
  EXPECT_TRUE(job->WaitAllExited(kTimeout));
  // The ready line names the metrics address.
  std::string ready;
  for (const std::string& line : job->coordinator().Lines()) {
    if (line.rfind("ready ", 0) == 0) ready = line;
  }
  const std::optional<int> port = PortAfter(ready, "metrics=127.0.0.1:");
  ASSERT_TRUE(port.has_value()) << ready;
  auto health = phalanx::testing::HttpGet(*port, "/healthz");
  ASSERT_TRUE(health.has_value());
  EXPECT_EQ(health->code, 200);
  auto metrics = phalanx::testing::HttpGet(*port, "/metrics");
  ASSERT_TRUE(metrics.has_value());
  EXPECT_EQ(metrics->code, 200);
  EXPECT_THAT(metrics->body, HasSubstr("phalanx_coordinator_tasks_registered 2"));
  EXPECT_THAT(metrics->body, HasSubstr("phalanx_coordinator_rpcs_total{"));
  EXPECT_THAT(metrics->body, HasSubstr("phalanx_coordinator_barrier_wait_seconds_bucket"));
}

TEST_F(MultiProcess, Coordinator_BadFlags_ExitNonZeroSayingWhatToFix) {
  struct Case {
    std::vector<std::string> args;
    std::string message;
  };
  const std::string bin =
      std::string(PHALANX_BUILD_DIR) + "/runtime/coordination/phalanx-coordinator";
  for (const Case& c : std::vector<Case>{
           {{bin, "--num_tasks=2", "--token_file=/dev/null"}, "--job is required"},
           {{bin, "--job=j", "--token_file=/dev/null"}, "--num_tasks"},
           {{bin, "--job=j", "--num_tasks=2", "--token_file=/nonexistent"}, "cannot read"},
           {{bin, "--job=j", "--num_tasks=2", "--token_file=/dev/null"}, "no job token"},
       }) {
    SCOPED_TRACE(c.message);
    process::SubprocessOptions options;
    options.argv = c.args;
    const std::string log = WorkDir() + ".log";
    options.stderr_path = log;
    auto child = process::Subprocess::Start(options);
    ASSERT_THAT(child, IsOk());
    ASSERT_TRUE((*child)->Wait(kTimeout).has_value());
    EXPECT_EQ((*child)->ExitCode(), 2);
    std::ifstream in(log);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_THAT(text, HasSubstr(c.message));
    std::filesystem::remove(log);
  }
}

}  // namespace
}  // namespace phalanx::harness
