// JobCliques with real coordination: an in-process coordinator, one gRPC client per task, the
// fake NCCL. The unique id travels through the job's key-value store; a task that restarts
// (new incarnation) makes every survivor abort and re-form, and the clique is READY again on
// the new membership.
#include "runtime/clique/job_cliques.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>

#include "absl/synchronization/mutex.h"
#include "common/auth/clique_ticket.h"
#include "common/testing/eventually.h"
#include "node_agent/cliques/clique_socket.h"
#include "runtime/client/coordination_client_impl.h"
#include "runtime/client/test_coordinator.h"
#include "runtime/clique/fake_nccl.h"

namespace phalanx::clique {
namespace {

using ::phalanx::client::testing::Coordinator;
using ::phalanx::client::testing::kToken;
using ::phalanx::testing::Eventually;

constexpr int kTasks = 3;

// One task's process: its client and its cliques. The client's session thread calls
// OnPeerChange until the client is gone, and the cliques use the client until they are gone, so
// neither can simply go first: the callback holds `mu` while it uses the cliques, and teardown
// unhooks them under `mu` before destroying them (without it a peer event that arrived during
// teardown ran on freed cliques: a rare abort of ReportsToTheAgentAreRefreshedWhileTheCliqueLives).
struct Task {
  ~Task() {
    Unhook();
    job_cliques.reset();
    client.reset();
  }
  void Unhook() {
    absl::MutexLock lock(&mu);
    cliques = nullptr;
  }
  void OnPeerChange(const client::TaskInfo& info) {
    absl::MutexLock lock(&mu);
    if (cliques != nullptr) cliques->OnPeerChange(info);
  }

  absl::Mutex mu;
  JobCliques* cliques ABSL_GUARDED_BY(mu) = nullptr;
  std::unique_ptr<client::CoordinationClientImpl> client;
  std::unique_ptr<JobCliques> job_cliques;
  CliqueId id = 0;
};

CliqueKey KeyFor(const std::vector<base::Incarnation>& incarnations) {
  std::vector<CliqueMember> members;
  for (int t = 0; t < kTasks; ++t)
    members.push_back({t, incarnations[static_cast<size_t>(t)], {0}});
  return *CliqueKey::Create("test", members);
}

class JobCliquesTest : public ::testing::Test {
 protected:
  void StartTask(int t, base::Incarnation incarnation) {
    auto task = std::make_unique<Task>();
    client::ClientConfig config;
    config.coordinator = "127.0.0.1:" + std::to_string(coordinator_.port());
    config.job = "test";
    config.task_id = t;
    config.num_tasks = kTasks;
    config.incarnation = incarnation;
    config.token = kToken;
    client::ClientCallbacks callbacks;
    Task* raw = task.get();
    callbacks.on_peer_change = [raw](const client::TaskInfo& info) { raw->OnPeerChange(info); };
    auto created = client::CoordinationClientImpl::Create(config, std::move(callbacks));
    ASSERT_TRUE(created.ok()) << created.status();
    task->client = *std::move(created);
    ASSERT_TRUE(task->client->Connect(absl::Seconds(20)).ok());
    task->job_cliques =
        std::make_unique<JobCliques>(*task->client, nccl_, base::RealClock::Get(), options_);
    {
      absl::MutexLock lock(&task->mu);
      task->cliques = task->job_cliques.get();
    }
    tasks_[static_cast<size_t>(t)] = std::move(task);
  }

  void Acquire(int t, const CliqueKey& key) {
    auto id = tasks_[static_cast<size_t>(t)]->job_cliques->Acquire(key, 0, absl::Seconds(30),
                                                                   kCurrentCudaDevice);
    ASSERT_TRUE(id.ok()) << id.status();
    tasks_[static_cast<size_t>(t)]->id = *id;
  }

  // The node agent's real socket server over `registry`, then every task started with its
  // clique on KeyFor({0, 0, 0}) READY and reported (refreshed every 100 ms).
  void StartReportingToAnAgent(const std::string& name, agent::CliqueRegistry& registry,
                               std::unique_ptr<agent::CliqueSocketServer>& server) {
    const std::string path = absl::StrCat("/tmp/phx-", name, "-", getpid(), ".sock");
    auto started = agent::CliqueSocketServer::Start({path}, registry, base::RealClock::Get());
    ASSERT_TRUE(started.ok()) << started.status();
    server = *std::move(started);
    options_.agent_socket = path;
    options_.agent_key = CliqueSocketKey(kToken);
    options_.agent_refresh = absl::Milliseconds(100);
    for (int t = 0; t < kTasks; ++t) StartTask(t, 0);
    const CliqueKey key = KeyFor({0, 0, 0});
    for (int t = kTasks - 1; t >= 0; --t) Acquire(t, key);
    ASSERT_TRUE(Eventually([&] { return AllReadyOn(key); }, absl::Seconds(30)));
    ASSERT_TRUE(Eventually([&] { return registry.List().size() == kTasks; }, absl::Seconds(30)));
  }

  bool AllReadyOn(const CliqueKey& key) {
    for (auto& task : tasks_) {
      absl::StatusOr<CliqueInfo> info = task->job_cliques->manager().Get(task->id);
      if (!info.ok() || info->state != CliqueState::kReady || !(info->key == key)) return false;
    }
    return true;
  }

  Coordinator coordinator_{kTasks};
  FakeNccl nccl_;
  JobCliques::Options options_;
  std::vector<std::unique_ptr<Task>> tasks_ = std::vector<std::unique_ptr<Task>>(kTasks);
};

TEST_F(JobCliquesTest, FormsThroughTheKeyValueStore_AndReformsWhenATaskRestarts) {
  for (int t = 0; t < kTasks; ++t) StartTask(t, 0);
  const CliqueKey first = KeyFor({0, 0, 0});
  for (int t = kTasks - 1; t >= 0; --t) Acquire(t, first);  // rank 0 publishes last
  ASSERT_TRUE(Eventually([&] { return AllReadyOn(first); }, absl::Seconds(30)));

  // Task 1 dies and comes back as incarnation 1 (a new process: a new client and manager).
  tasks_[1].reset();
  StartTask(1, 1);
  const CliqueKey second = KeyFor({0, 1, 0});
  Acquire(1, second);
  ASSERT_TRUE(Eventually([&] { return AllReadyOn(second); }, absl::Seconds(30)));
  EXPECT_GE(nccl_.counts().inits, 2 * kTasks);
  EXPECT_GE(tasks_[0]->job_cliques->manager().counters().reforms, 1);
}

TEST(ReportToAgentTest, AnAbortRequestIsReadFromTheAgentsAnswerWithItsSpacesBack) {
  // The agent's answer as node_agent/cliques/clique_socket_test.cc pins it.
  EXPECT_EQ(AbortRequestIn("OK abort=xid_79_on_gpu_3"), "xid 79 on gpu 3");
  EXPECT_EQ(AbortRequestIn("OK"), std::nullopt);
  EXPECT_EQ(AbortRequestIn("ERR abort=no"), std::nullopt);
  EXPECT_EQ(AbortRequestIn("OK abort="), "");
}

TEST(ReportToAgentTest, NoAgentIsUnavailableNotAHang) {
  CliqueInfo info;
  info.key = KeyFor({0, 0, 0});
  absl::StatusOr<std::string> answer =
      ReportToAgent("/nonexistent/phalanx.sock", "key", "test", {0, 0}, info);
  EXPECT_TRUE(absl::IsUnavailable(answer.status())) << answer.status();
}

// Reports to the node agent are re-sent while the clique lives, so the agent's TTL (which drops
// reports of tasks that died without a word) never drops a live one.
TEST_F(JobCliquesTest, ReportsToTheAgentAreRefreshedWhileTheCliqueLives) {
  agent::CliqueRegistry registry;
  std::unique_ptr<agent::CliqueSocketServer> server;
  ASSERT_NO_FATAL_FAILURE(StartReportingToAnAgent("refresh", registry, server));
  const absl::Time ready = absl::Now();
  // No state changes from here on: only the refresh can bring newer reports.
  EXPECT_TRUE(Eventually(
      [&] {
        for (const agent::LocalClique& c : registry.List()) {
          if (c.updated <= ready || c.state != "READY") return false;
        }
        return registry.List().size() == kTasks;
      },
      absl::Seconds(30)));
  for (auto& task : tasks_) task.reset();  // before the server goes
}

// The node agent's abort request (a GPU under these tasks failed) is obeyed, as the Python
// Manager obeys it: the answer to the next report carries it, and every clique of the task goes
// FAILED at once, its communicator aborted, with the agent's reason.
TEST_F(JobCliquesTest, TheAgentsAbortRequestFailsTheTasksCliques) {
  agent::CliqueRegistry registry;
  std::unique_ptr<agent::CliqueSocketServer> server;
  ASSERT_NO_FATAL_FAILURE(StartReportingToAnAgent("abort", registry, server));
  const int64_t aborts_before = tasks_[0]->job_cliques->manager().counters().aborts;

  EXPECT_EQ(registry.RequestAbortForDevice(0, "xid 79 on gpu 0"), kTasks);
  for (auto& task : tasks_) {
    ASSERT_TRUE(Eventually(
        [&] {
          absl::StatusOr<CliqueInfo> info = task->job_cliques->manager().Get(task->id);
          return info.ok() && info->state == CliqueState::kFailed;
        },
        absl::Seconds(30)));
    absl::StatusOr<CliqueInfo> info = task->job_cliques->manager().Get(task->id);
    EXPECT_TRUE(absl::IsAborted(info->status)) << info->status;
    EXPECT_THAT(std::string(info->status.message()), ::testing::HasSubstr("xid 79 on gpu 0"));
  }
  EXPECT_GT(tasks_[0]->job_cliques->manager().counters().aborts, aborts_before)
      << "its communicator was aborted";
  for (auto& task : tasks_) task.reset();  // before the server goes
}

// The client's REPORT against the node agent's real socket server: the keyed report is taken,
// the same (job, task) reported under another task credential's key is refused.
TEST(ReportToAgentTest, TheAgentTakesAKeyedReportAndRefusesAnotherCredentialsKey) {
  const std::string path = absl::StrCat("/tmp/phx-report-", getpid(), ".sock");
  agent::CliqueRegistry registry;
  auto server = agent::CliqueSocketServer::Start({path}, registry, base::RealClock::Get());
  ASSERT_TRUE(server.ok()) << server.status();
  CliqueInfo info;
  info.key = KeyFor({0, 0, 0});
  info.state = CliqueState::kReady;
  absl::StatusOr<std::string> answer =
      ReportToAgent(path, CliqueSocketKey("task-0"), "test", {0, 0}, info);
  ASSERT_TRUE(answer.ok()) << answer.status();
  EXPECT_EQ(*answer, "OK");
  ASSERT_EQ(registry.List().size(), 1u);
  EXPECT_EQ(registry.List()[0].state, "READY");
  answer = ReportToAgent(path, CliqueSocketKey("someone-else"), "test", {0, 0}, info);
  EXPECT_TRUE(absl::IsPermissionDenied(answer.status())) << answer.status();
  EXPECT_EQ(registry.ListFor(CliqueSocketKey("task-0")).size(), 1u);
}

// The channel task pods get under Pod Security "restricted" (docs/adr/0004): the agent on TCP
// (here 127.0.0.1), the same protocol and the same per-credential keys.
TEST(ReportToAgentTest, OverTcpTheAgentTakesAKeyedReportAndRefusesAnotherCredentialsKey) {
  agent::CliqueRegistry registry;
  auto server = agent::CliqueSocketServer::Start({"127.0.0.1:0"}, registry, base::RealClock::Get());
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string address = absl::StrCat("127.0.0.1:", (*server)->port());
  CliqueInfo info;
  info.key = KeyFor({0, 0, 0});
  info.state = CliqueState::kReady;
  absl::StatusOr<std::string> answer =
      ReportToAgent(address, CliqueSocketKey("task-0"), "test", {0, 0}, info);
  ASSERT_TRUE(answer.ok()) << answer.status();
  EXPECT_EQ(*answer, "OK");
  ASSERT_EQ(registry.List().size(), 1u);
  answer = ReportToAgent(address, CliqueSocketKey("someone-else"), "test", {0, 0}, info);
  EXPECT_TRUE(absl::IsPermissionDenied(answer.status())) << answer.status();
  (*server)->Stop();
  answer = ReportToAgent(address, CliqueSocketKey("task-0"), "test", {0, 0}, info);
  EXPECT_TRUE(absl::IsUnavailable(answer.status())) << answer.status();
}

TEST(JobCliquesOptionsTest, TheNodeAddressWinsOverAMountedSocket) {
  setenv("PHALANX_CLIQUE_SOCKET", "/var/run/phalanx/cliques.sock", 1);
  EXPECT_EQ(JobCliques::OptionsFromEnv().agent_socket, "/var/run/phalanx/cliques.sock");
  setenv("PHALANX_CLIQUE_ADDRESS", "10.0.0.7:8479", 1);
  EXPECT_EQ(JobCliques::OptionsFromEnv().agent_socket, "10.0.0.7:8479");
  unsetenv("PHALANX_CLIQUE_ADDRESS");
  unsetenv("PHALANX_CLIQUE_SOCKET");
}

// What task pods get from the operator (common/auth/clique_ticket.h): the ticket, read from its
// file, is the key a verifying agent takes over TCP; another job's ticket is refused for this
// (job, task), and a task without a ticket file still reports with its credential's digest.
TEST(ReportToAgentTest, ATicketFromItsFileIsTheKeyAVerifyingAgentTakes) {
  const std::string agent_key = auth::AgentCliqueKey("an-operator-key-of-at-least-32-characters");
  agent::CliqueRegistryOptions options;
  options.ticket_key = [agent_key]() -> absl::StatusOr<std::string> { return agent_key; };
  agent::CliqueRegistry registry(options);
  auto server = agent::CliqueSocketServer::Start({"127.0.0.1:0"}, registry, base::RealClock::Get());
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string address = absl::StrCat("127.0.0.1:", (*server)->port());
  const std::string file = absl::StrCat(::testing::TempDir(), "/ticket-0");
  {
    std::ofstream out(file);
    out << auth::CliqueTicket(agent_key, "team-a", "test", "uid-1", 0) << "\n";
  }
  setenv("PHALANX_TOKEN", "task-0", 1);
  EXPECT_EQ(JobCliques::OptionsFromEnv().agent_key, CliqueSocketKey("task-0"));
  setenv("PHALANX_CLIQUE_TICKET_FILE", file.c_str(), 1);
  const std::string ticket = JobCliques::OptionsFromEnv().agent_key;
  unsetenv("PHALANX_CLIQUE_TICKET_FILE");
  unsetenv("PHALANX_TOKEN");
  EXPECT_EQ(ticket.rfind("clique/v1/team-a/test/uid-1/0/", 0), 0u) << ticket;
  CliqueInfo info;
  info.key = KeyFor({0, 0, 0});
  info.state = CliqueState::kReady;
  absl::StatusOr<std::string> answer =
      ReportToAgent(address, CliqueSocketKey("task-0"), "test", {0, 0}, info);
  EXPECT_TRUE(absl::IsPermissionDenied(answer.status())) << answer.status();
  answer = ReportToAgent(address, auth::CliqueTicket(agent_key, "team-b", "test", "uid-2", 1),
                         "test", {0, 0}, info);
  EXPECT_TRUE(absl::IsPermissionDenied(answer.status())) << answer.status();
  answer = ReportToAgent(address, ticket, "test", {0, 0}, info);
  ASSERT_TRUE(answer.ok()) << answer.status();
  EXPECT_EQ(*answer, "OK");
  EXPECT_EQ(registry.ListFor(ticket).size(), 1u);
}

TEST(CliqueSocketKeyTest, IsAStableDigestThatDiffersPerTokenAndHidesIt) {
  const std::string a = CliqueSocketKey("token-a");
  EXPECT_EQ(a.size(), 64u);  // hex SHA-256
  EXPECT_EQ(a, CliqueSocketKey("token-a"));
  EXPECT_NE(a, CliqueSocketKey("token-b"));
  EXPECT_EQ(a.find("token-a"), std::string::npos);
  EXPECT_EQ(CliqueSocketKey(""), "");
}

}  // namespace
}  // namespace phalanx::clique
