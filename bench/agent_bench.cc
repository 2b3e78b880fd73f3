// phalanx-agent-bench: whole-workload benchmarks of the node agent and the clique manager.
//   notice:  local cluster (3 process nodes × 2 GPUs), phalanx-operator, one phalanx-agent per
//            node polling its own fake GCE metadata server (127.0.0.1), a 2-task job of sample
//            workers (20 ms steps). The victim node's server flips to preempted=TRUE; the time
//            until every task has checkpointed at the agreed sync step (the workers' EVENT
//            lines carry unix ms). Fresh stack per run; the median.
//   reform:  8 clique managers (one per task, each polled by its own thread every 1 ms, as a
//            client's runner would) over the fake NCCL and an in-memory unique-id exchange form
//            one 8-rank clique; task 3 restarts (new incarnation). From the membership change
//            to every survivor's communicator aborted and all 8 READY on the new key.
//   rss:     phalanx-agent with 8 fake GPUs and 8 tasks reporting cliques on its socket.
// Writes JSON (--out) and prints a table. See docs/benchmarks.md.
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "bench/bench_util.h"
#include "common/base/clock.h"
#include "common/base/periodic_runner.h"
#include "common/base/process_init.h"
#include "common/kube/cluster_config.h"
#include "common/kube/object_meta.h"
#include "common/kube/rest_client.h"
#include "common/process/subprocess.h"
#include "node_agent/preemption/fake_metadata_server.h"
#include "operator/api/yaml_json.h"
#include "operator/controller/reconciler.h"
#include "runtime/clique/clique_manager.h"
#include "runtime/clique/fake_nccl.h"
#include "runtime/clique/in_memory_unique_id_exchange.h"

ABSL_FLAG(std::string, bin_dir, "build", "build directory");
ABSL_FLAG(std::string, source_dir, ".", "source directory (for the CRD)");
ABSL_FLAG(std::string, out, "build/bench/agent.json", "where the JSON goes");
ABSL_FLAG(int, runs, 3, "runs of the notice measurement (median)");
ABSL_FLAG(absl::Duration, poll_interval, absl::Seconds(1), "the agents' --poll_interval");
ABSL_FLAG(int, reforms, 20, "clique re-forms measured (median)");
ABSL_FLAG(std::string, only, "", "comma-separated subset: notice,reform,rss");
ABSL_FLAG(std::string, backend, "builtin",
          "the local cluster's back end: builtin (the figures in docs/benchmarks.md), real (etcd + "
          "kube-apiserver sharing the machine's cores) or auto");

namespace phalanx::bench {
namespace {

namespace fs = std::filesystem;
using agent::testing::FakeMetadataServer;
using agent::testing::ScriptedResponse;

// Unix ms of every `kind=<kind>` EVENT line in the pod logs under `logs`, by pod.
std::map<std::string, std::vector<int64_t>> EventTimes(const fs::path& logs,
                                                       const std::string& kind) {
  std::map<std::string, std::vector<int64_t>> out;
  if (!fs::exists(logs)) return out;
  for (const auto& entry : fs::directory_iterator(logs)) {
    std::istringstream in(ReadFile(entry.path().string()));
    std::string line;
    while (std::getline(in, line)) {
      if (!absl::StrContains(line, " kind=" + kind)) continue;
      const size_t at = line.find("t_ms=");
      int64_t t = 0;
      if (at != std::string::npos &&
          absl::SimpleAtoi(line.substr(at + 5, line.find(' ', at) - at - 5), &t)) {
        out[entry.path().stem().string()].push_back(t);
      }
    }
  }
  return out;
}

// One notice run on a fresh stack; milliseconds from the flip to the last task's sync
// checkpoint, or kFailed.
double NoticeOnce(int run) {
  const std::string bin = absl::GetFlag(FLAGS_bin_dir);
  const fs::path dir =
      fs::temp_directory_path() / absl::StrCat("phalanx-agent-bench-", getpid(), "-", run);
  fs::create_directories(dir);
  const std::string kubeconfig = (dir / "kubeconfig").string();
  double result = kFailed;
  std::unique_ptr<process::Subprocess> cluster, op;
  std::vector<std::unique_ptr<process::Subprocess>> agents;
  std::vector<std::unique_ptr<FakeMetadataServer>> metadata;
  [&] {
    cluster = StartUntilReady({bin + "/tests/localcluster/phalanx-localcluster", "--kubeconfig-out",
                               kubeconfig, "--work-dir", (dir / "cluster").string(), "--nodes", "3",
                               "--gpus-per-node", "2", "--backend", absl::GetFlag(FLAGS_backend)},
                              (dir / "cluster.log").string());
    if (cluster == nullptr) return;
    absl::StatusOr<kube::ClusterConfig> config = kube::LoadKubeconfig(kubeconfig);
    if (!config.ok()) return;
    std::unique_ptr<kube::RestClient> client = *kube::RestClient::Create(*config);
    if (!ApplyTrainingJobCrd(*client, absl::GetFlag(FLAGS_source_dir))) return;
    const int port_base = 20000 + static_cast<int>((getpid() + run * 97) % 4000) * 2;
    op = StartUntilReady(
        {bin + "/operator/phalanx-operator", "--kubeconfig", kubeconfig, "--coordinator_command",
         bin + "/runtime/coordination/phalanx-coordinator", "--coordinator_address", "pod-ip",
         "--coordinator_port_base", absl::StrCat(port_base), "--metrics_listen", "127.0.0.1:0",
         "--lease_namespace", "default"},
        (dir / "operator.log").string());
    if (op == nullptr) return;
    for (int n = 0; n < 3; ++n) {
      auto server = FakeMetadataServer::Start();
      if (!server.ok()) return;
      (*server)->Set("GET", "/computeMetadata/v1/instance/preempted",
                     ScriptedResponse::Ok("FALSE"));
      (*server)->Set("GET", "/computeMetadata/v1/instance/maintenance-event",
                     ScriptedResponse::Ok("NONE"));
      const std::string node = absl::StrCat("node-", n);
      agents.push_back(StartUntilReady(
          {bin + "/node_agent/phalanx-agent", "--kubeconfig", kubeconfig, "--node_name", node,
           "--notice_sources", "gce", "--gce_metadata_url", (*server)->base_url(), "--fake_gpus",
           "2", "--poll_interval", absl::FormatDuration(absl::GetFlag(FLAGS_poll_interval)),
           "--clique_socket", (dir / (node + ".sock")).string(), "--metrics_listen", "127.0.0.1:0"},
          (dir / ("agent-" + node + ".log")).string()));
      if (agents.back() == nullptr) return;
      metadata.push_back(*std::move(server));
    }
    const std::string worker = bin + "/examples/sample_worker/phalanx-sample-worker";
    kube::Json job = kube::Json::parse(absl::StrCat(
        R"({"apiVersion":"phalanx.dev/v1alpha1","kind":"TrainingJob","metadata":{"name":"bench"},
            "spec":{"replicas":2,"preemption":{"checkpointGraceSeconds":30},
              "template":{"spec":{"terminationGracePeriodSeconds":1,"containers":[{"name":"w","image":"x","command":[")",
        worker,
        R"("],"args":["--steps=100000","--step_time=20ms","--checkpoint_every=50","--checkpoint_dir=)",
        (dir / "ckpt").string(), R"("],"resources":{"limits":{"nvidia.com/gpu":2}}}]}}}})"));
    if (!client->Create(op::kTrainingJobs, "default", job).ok()) return;
    const fs::path logs = dir / "cluster" / "logs";
    const absl::Time deadline = absl::Now() + absl::Seconds(90);
    while (absl::Now() < deadline && EventTimes(logs, "start").size() < 2) {
      absl::SleepFor(absl::Milliseconds(100));
    }
    absl::SleepFor(absl::Seconds(1));  // both tasks are in their step loop
    absl::StatusOr<kube::Json> coordinator = client->Get(op::kPods, "default", "bench-coordinator");
    if (!coordinator.ok()) return;
    int victim_node = -1;
    for (int i = 0; i < 2 && victim_node < 0; ++i) {
      absl::StatusOr<kube::Json> pod =
          client->Get(op::kPods, "default", absl::StrCat("bench-task-", i, "-0"));
      if (!pod.ok()) return;
      const std::string node = kube::StringAt(*pod, "spec.nodeName");
      if (node != kube::StringAt(*coordinator, "spec.nodeName")) victim_node = node.back() - '0';
    }
    if (victim_node < 0) return;
    const int64_t flipped = absl::ToUnixMillis(absl::Now());
    metadata[static_cast<size_t>(victim_node)]->Set("GET", "/computeMetadata/v1/instance/preempted",
                                                    ScriptedResponse::Ok("TRUE"));
    while (absl::Now() < deadline + absl::Seconds(30)) {
      const auto synced = EventTimes(logs, "sync_checkpoint");
      int64_t last = 0;
      int tasks = 0;
      for (int i = 0; i < 2; ++i) {
        auto it = synced.find(absl::StrCat("default_bench-task-", i, "-0"));
        if (it == synced.end()) break;
        ++tasks;
        last = std::max(last, it->second.front());
      }
      if (tasks == 2) {
        result = static_cast<double>(last - flipped);
        return;
      }
      absl::SleepFor(absl::Milliseconds(20));
    }
    std::fprintf(stderr, "bench: run %d: the tasks never checkpointed (logs: %s)\n", run,
                 dir.c_str());
  }();
  for (auto& a : agents) StopProcess(a);
  StopProcess(op);
  StopProcess(cluster);
  if (result >= 0) fs::remove_all(dir);
  return result;
}

double RunReform() {
  constexpr int kTasks = 8;
  base::Clock& clock = base::RealClock::Get();
  clique::FakeNccl nccl;
  clique::InMemoryUniqueIdExchange exchange;
  std::vector<std::unique_ptr<clique::CliqueManager>> managers;
  std::vector<clique::CliqueId> ids(kTasks);
  std::vector<base::Incarnation> incarnations(kTasks, 0);
  std::vector<clique::CliqueMember> members;
  for (int t = 0; t < kTasks; ++t) {
    managers.push_back(std::make_unique<clique::CliqueManager>(nccl, exchange, clock,
                                                               clique::CliqueManager::Options{}));
    members.push_back({t, 0, {0}});
  }
  const clique::CliqueKey key = *clique::CliqueKey::Create("bench", members);
  for (int t = 0; t < kTasks; ++t) {
    ids[static_cast<size_t>(t)] =
        *managers[static_cast<size_t>(t)]->Acquire(key, t, clock.Now() + absl::Seconds(30));
  }
  // Each task's runner: Poll every 1 ms (the managers are thread-safe; the victim's pointer is
  // swapped only between polls, under this mutex).
  absl::Mutex mu;
  std::vector<std::unique_ptr<base::PeriodicRunner>> runners;
  for (int t = 0; t < kTasks; ++t) {
    runners.push_back(std::make_unique<base::PeriodicRunner>(
        clock, absl::Milliseconds(1), [&, t](absl::Time now) {
          absl::MutexLock lock(&mu);
          managers[static_cast<size_t>(t)]->Poll(now);
        }));
  }
  std::vector<double> samples;
  for (int r = 0; r < absl::GetFlag(FLAGS_reforms); ++r) {
    absl::Time start;
    clique::CliqueKey next_key;
    {
      // Task 3 restarts: its next incarnation's process (a new manager) acquires the new key,
      // and every survivor learns the membership, all between two polls.
      absl::MutexLock lock(&mu);
      incarnations[3] = r + 1;
      std::vector<clique::CliqueMember> m;
      std::vector<clique::MemberStatus> status;
      for (int t = 0; t < kTasks; ++t) {
        m.push_back({t, incarnations[static_cast<size_t>(t)], {0}});
        status.push_back({t, incarnations[static_cast<size_t>(t)], true});
      }
      next_key = *clique::CliqueKey::Create("bench", m);
      start = absl::Now();
      managers[3] = std::make_unique<clique::CliqueManager>(nccl, exchange, clock,
                                                            clique::CliqueManager::Options{});
      ids[3] =
          *managers[3]->Acquire(next_key, *next_key.RankOf(3, 0), clock.Now() + absl::Seconds(30));
      for (int t = 0; t < kTasks; ++t) {
        if (t != 3) managers[static_cast<size_t>(t)]->OnMembershipChange(status);
      }
    }
    bool ready = false;
    while (!ready && absl::Now() - start < absl::Seconds(10)) {
      absl::SleepFor(absl::Microseconds(200));
      absl::MutexLock check(&mu);
      ready = true;
      for (int t = 0; t < kTasks && ready; ++t) {
        absl::StatusOr<clique::CliqueInfo> info =
            managers[static_cast<size_t>(t)]->Get(ids[static_cast<size_t>(t)]);
        ready = info.ok() && info->state == clique::CliqueState::kReady && info->key == next_key;
      }
    }
    samples.push_back(ready ? absl::ToDoubleMilliseconds(absl::Now() - start) : kFailed);
  }
  for (auto& r : runners) r->Stop();
  return Median(samples);
}

double AgentRss() {
  const std::string bin = absl::GetFlag(FLAGS_bin_dir);
  const fs::path dir = fs::temp_directory_path() / absl::StrCat("phalanx-agent-rss-", getpid());
  fs::create_directories(dir);
  const std::string socket_path = (dir / "cliques.sock").string();
  std::unique_ptr<process::Subprocess> a =
      StartUntilReady({bin + "/node_agent/phalanx-agent", "--kube=false", "--notice_sources",
                       "sigterm", "--fake_gpus", "8", "--clique_socket", socket_path,
                       "--metrics_listen", "127.0.0.1:0", "--poll_interval", "1s"},
                      (dir / "agent.log").string());
  double rss = kFailed;
  if (a != nullptr) {
    for (int task = 0; task < 8; ++task) {
      const int fd = socket(AF_UNIX, SOCK_STREAM, 0);
      sockaddr_un addr{};
      addr.sun_family = AF_UNIX;
      std::memcpy(addr.sun_path, socket_path.c_str(), socket_path.size());
      if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) {
        const std::string line =
            absl::StrCat("REPORT job=bench task=", task,
                         " inc=0 clique=c0 state=READY devices=", task, " key=bench-key\n");
        (void)!send(fd, line.data(), line.size(), MSG_NOSIGNAL);
        char buf[64];
        (void)!read(fd, buf, sizeof(buf));
      }
      close(fd);
    }
    absl::SleepFor(absl::Seconds(3));  // a few ticks with the 8 GPUs and 8 tasks
    rss = RssMib(a->pid());
  }
  StopProcess(a);
  fs::remove_all(dir);
  return rss;
}

}  // namespace
}  // namespace phalanx::bench

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  phalanx::base::InitProcess("agent-bench");
  using namespace phalanx::bench;
  const std::string only = absl::GetFlag(FLAGS_only);
  auto wanted = [&](absl::string_view name) { return Wanted(only, name); };
  double notice_ms = kFailed, reform_ms = kFailed, rss = kFailed;
  if (wanted("notice")) {
    std::vector<double> runs;
    for (int r = 0; r < absl::GetFlag(FLAGS_runs); ++r) {
      runs.push_back(NoticeOnce(r));
      std::fprintf(stderr, "notice run %d: %.0f ms\n", r + 1, runs.back());
    }
    notice_ms = Median(runs);
  }
  if (wanted("reform")) reform_ms = RunReform();
  if (wanted("rss")) rss = AgentRss();

  const double poll_ms = absl::ToDoubleMilliseconds(absl::GetFlag(FLAGS_poll_interval));
  const auto num = JsonNumber;
  const std::string json = absl::StrCat("{\n  \"poll_interval_ms\": ", num(poll_ms, 0),
                                        ",\n  \"notice_to_sync_ms\": ", num(notice_ms, 0),
                                        ",\n  \"abort_reform_ms\": ", num(reform_ms, 2),
                                        ",\n  \"agent_rss_mib\": ", num(rss, 1), "\n}\n");
  const std::string out = absl::GetFlag(FLAGS_out);
  std::filesystem::create_directories(std::filesystem::path(out).parent_path());
  std::ofstream(out) << json;
  const auto cell = TableCell;
  std::printf("\n| key | result | target |\n|---|---|---|\n");
  std::printf("| notice_to_sync_ms | %s | < %.0f |\n", cell(notice_ms, 0).c_str(), poll_ms + 200);
  std::printf("| abort_reform_ms (fake NCCL, 8 ranks) | %s | < 100 |\n",
              cell(reform_ms, 2).c_str());
  std::printf("| agent_rss_mib (8 GPUs, 8 tasks) | %s | < 64 |\n", cell(rss, 1).c_str());
  std::printf("\nwritten to %s\n", out.c_str());
  return 0;
}
