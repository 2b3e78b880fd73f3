// phalanx-coord-bench: whole-workload benchmarks of the coordination service on this machine.
// The coordinator is the real binary; tasks run in a few task-host processes (threads), each
// task with its own gRPC connection. Writes JSON (--out) and prints a table.
// See docs/benchmarks.md for what each key measures.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "bench/barrier_reference.h"
#include "bench/coordination_workload.h"
#include "bench/measure_util.h"
#include "bench/task_host.h"
#include "common/base/process_init.h"
#include "common/process/subprocess.h"
#include "examples/local_job/local_job.h"
#include "runtime/client/coordination_client_impl.h"

ABSL_FLAG(std::string, bin_dir, "build", "build directory");
ABSL_FLAG(std::string, out, "build/bench/coordination.json", "where the JSON goes");
ABSL_FLAG(int, runs, 3, "runs per measurement (the median is reported)");
ABSL_FLAG(std::string, role, "driver",
          "driver | tasks | reference (internal: a task-host process, Phalanx or reference)");
ABSL_FLAG(std::string, address, "", "tasks role: coordinator address");
ABSL_FLAG(std::string, token, "", "tasks role: job token");
ABSL_FLAG(int, first, 0, "tasks role: first task id");
ABSL_FLAG(int, count, 1, "tasks role: how many tasks");
ABSL_FLAG(int, num_tasks, 1, "tasks role: tasks in the job");
ABSL_FLAG(int, barriers, 0, "tasks role: barriers after the rendezvous");
ABSL_FLAG(double, kv_seconds, 5, "duration of the key-value workload");
ABSL_FLAG(bool, tls, false,
          "run the coordinator with TLS as the operator does by default (a throwaway CA; the "
          "session wire and gRPC over TLS)");
ABSL_FLAG(std::string, tls_ca_file, "", "tasks role: the coordinator's CA (TLS)");
ABSL_FLAG(std::string, only, "",
          "comma-separated subset: rendezvous,barrier,kv,latency,crash,hang");

namespace phalanx::bench {
namespace {

using harness::LocalJob;

std::string self_path;

struct Line {
  std::string kind;
  std::map<std::string, std::string> fields;
  int64_t Int(const std::string& k) const {
    int64_t v = 0;
    auto it = fields.find(k);
    if (it != fields.end()) (void)absl::SimpleAtoi(it->second, &v);
    return v;
  }
};

std::vector<Line> Parse(const std::vector<std::string>& raw) {
  std::vector<Line> lines;
  for (const std::string& s : raw) {
    std::vector<std::string> parts = absl::StrSplit(s, ' ');
    if (parts.empty()) continue;
    Line line{parts[0], {}};
    for (size_t i = 1; i < parts.size(); ++i) {
      std::vector<std::string> kv = absl::StrSplit(parts[i], absl::MaxSplits('=', 1));
      if (kv.size() == 2) line.fields[kv[0]] = kv[1];
    }
    lines.push_back(std::move(line));
  }
  return lines;
}

// This run's scratch directory (coordinator and host logs); removed at the end.
std::string WorkDir() {
  return std::filesystem::temp_directory_path() / absl::StrCat("phalanx-bench-", getpid());
}

// A fresh coordinator for one measurement.
std::unique_ptr<LocalJob> StartCoordinator(int num_tasks, absl::Duration heartbeat_timeout,
                                           absl::Duration heartbeat_interval) {
  return StartBenchCoordinator(absl::GetFlag(FLAGS_bin_dir), WorkDir(), num_tasks,
                               heartbeat_timeout, heartbeat_interval, absl::GetFlag(FLAGS_tls));
}

// `role`: tasks (Phalanx clients) or reference (barrier_reference.h; it ignores the token).
std::unique_ptr<process::Subprocess> StartHost(const std::string& role, const std::string& address,
                                               const std::string& token,
                                               const std::string& work_dir, int first, int count,
                                               int num_tasks, int barriers) {
  process::SubprocessOptions options;
  options.argv = {self_path,
                  "--role=" + role,
                  "--address=" + address,
                  "--token=" + token,
                  absl::StrCat("--first=", first),
                  absl::StrCat("--count=", count),
                  absl::StrCat("--num_tasks=", num_tasks),
                  absl::StrCat("--barriers=", barriers)};
  if (absl::GetFlag(FLAGS_tls) && role == "tasks") {
    options.argv.push_back("--tls_ca_file=" + work_dir + "/ca.crt");
  }
  options.stderr_path = work_dir + "/host.log";
  auto host = process::Subprocess::Start(options);
  if (!host.ok()) {
    std::fprintf(stderr, "bench: %s\n", host.status().ToString().c_str());
    std::exit(1);
  }
  return *std::move(host);
}

int HostsFor(int n) { return std::clamp(n / 32, 1, 8); }

// Starts N tasks across a few host processes; waits until each printed `expected` PASS lines.
struct Gang {
  std::unique_ptr<LocalJob> job;  // null for the reference barrier
  std::unique_ptr<ReferenceBarrierServer> reference;
  std::vector<std::unique_ptr<process::Subprocess>> hosts;
  int64_t t0_us = 0;
  std::vector<Line> lines;
  bool ok = true;
};

// `reference`: the reference barrier's server and hosts instead of Phalanx's.
Gang RunGang(int n, int barriers, bool reference = false) {
  Gang gang;
  std::string address, token, work_dir;
  if (reference) {
    auto server = ReferenceBarrierServer::Start(n);
    if (!server.ok()) {
      std::fprintf(stderr, "bench: %s\n", server.status().ToString().c_str());
      std::exit(1);
    }
    gang.reference = *std::move(server);
    address = gang.reference->address();
    work_dir = WorkDir();
    std::filesystem::create_directories(work_dir);
  } else {
    gang.job = StartCoordinator(n, absl::Seconds(10), absl::Seconds(1));
    address = gang.job->address();
    token = gang.job->options().token;
    work_dir = gang.job->options().work_dir;
  }
  const int hosts = HostsFor(n);
  gang.t0_us = absl::ToUnixMicros(absl::Now());
  for (int h = 0; h < hosts; ++h) {
    const int first = n * h / hosts;
    const int last = n * (h + 1) / hosts;
    gang.hosts.push_back(StartHost(reference ? "reference" : "tasks", address, token, work_dir,
                                   first, last - first, n, barriers));
  }
  for (int h = 0; h < hosts; ++h) {
    const int count = n * (h + 1) / hosts - n * h / hosts;
    const size_t expected = static_cast<size_t>(count) * (barriers + 1);
    size_t seen = 0;
    const absl::Time deadline = absl::Now() + absl::Seconds(180);
    while (seen < expected && absl::Now() < deadline) {
      auto line = gang.hosts[h]->WaitForLine(
          [](const std::string& l) { return l.rfind("PASS", 0) == 0 || l.rfind("ERROR", 0) == 0; },
          deadline - absl::Now(), 0);
      std::vector<std::string> all = gang.hosts[h]->Lines();
      seen = std::count_if(all.begin(), all.end(),
                           [](const std::string& l) { return l.rfind("PASS", 0) == 0; });
      if (std::any_of(all.begin(), all.end(),
                      [](const std::string& l) { return l.rfind("ERROR", 0) == 0; })) {
        std::fprintf(stderr, "bench: task error: see output of host %d\n", h);
        for (auto& l : all)
          if (l.rfind("ERROR", 0) == 0) std::fprintf(stderr, "  %s\n", l.c_str());
        gang.ok = false;
        return gang;
      }
      if (!line.has_value()) break;
      if (seen < expected)
        gang.hosts[h]->WaitForLine([](const std::string&) { return true; }, absl::Milliseconds(50),
                                   all.size());
    }
    if (seen < expected) gang.ok = false;
    for (Line& l : Parse(gang.hosts[h]->Lines())) gang.lines.push_back(std::move(l));
  }
  return gang;
}

void StopGang(Gang& gang) {
  for (auto& h : gang.hosts) h->Signal(SIGTERM);
  for (auto& h : gang.hosts) h->Wait(absl::Seconds(20));
  gang.hosts.clear();
  gang.job.reset();
  gang.reference.reset();
}

struct Results {
  std::map<int, double> rendezvous_s;
  std::map<int, double> barrier_p50_ms;
  std::map<int, double> barrier_reference_ms;
  double kv_ops_per_s = 0;
  double kv_get_p50_us = 0;
  double kv_set_p50_us = 0;
  double connect_p50_ms = 0;
  double crash_detect_p50_ms = 0;
  double hang_detect_s = 0;
  double hang_timeout_s = 0;
  double coordinator_rss_mib_1024 = 0;
};

void BenchRendezvous(Results& r, int runs) {
  for (int n : {16, 64, 256, 1024}) {
    std::vector<double> times;
    std::vector<double> rss;
    for (int run = 0; run < runs; ++run) {
      Gang gang = RunGang(n, 0);
      if (!gang.ok) {
        StopGang(gang);
        continue;
      }
      int64_t last = 0;
      for (const Line& l : gang.lines)
        if (l.kind == "PASS") last = std::max(last, l.Int("t_us"));
      times.push_back((last - gang.t0_us) / 1e6);
      if (n == 1024) rss.push_back(RssMib(gang.job->coordinator().pid()));
      StopGang(gang);
    }
    r.rendezvous_s[n] = Median(times);
    if (n == 1024) r.coordinator_rss_mib_1024 = Median(rss);
    std::fprintf(stderr, "  rendezvous %4d tasks: %.3f s (%zu runs, %d host processes)\n", n,
                 r.rendezvous_s[n], times.size(), HostsFor(n));
  }
}

// One barrier run (Phalanx's, or the reference's): the median round in ms, kFailed if it failed.
double BarrierRoundP50(int n, int barriers, bool reference) {
  Gang gang = RunGang(n, barriers, reference);
  if (!gang.ok) {
    StopGang(gang);
    return kFailed;
  }
  std::vector<int64_t> last(barriers + 1, 0);
  for (const Line& l : gang.lines) {
    if (l.kind != "PASS") continue;
    const int64_t b = l.Int("barrier") + 1;
    last[b] = std::max(last[b], l.Int("t_us"));
  }
  std::vector<double> rounds;
  for (int b = 1; b <= barriers; ++b) rounds.push_back((last[b] - last[b - 1]) / 1e3);
  StopGang(gang);
  return Median(rounds);
}

void BenchBarriers(Results& r, int runs) {
  constexpr int kBarriers = 20;
  for (int n : {16, 64, 256}) {
    std::vector<double> p50s, reference;
    for (int run = 0; run < runs; ++run) {
      // Interleaved, so both see the machine at the same speed.
      p50s.push_back(BarrierRoundP50(n, kBarriers, /*reference=*/false));
      reference.push_back(BarrierRoundP50(n, kBarriers, /*reference=*/true));
    }
    r.barrier_p50_ms[n] = Median(p50s);
    r.barrier_reference_ms[n] = Median(reference);
    std::fprintf(stderr, "  barrier %3d tasks: p50 %.2f ms per barrier (reference %.2f ms)\n", n,
                 r.barrier_p50_ms[n], r.barrier_reference_ms[n]);
  }
}

void BenchKv(Results& r, int runs) {
  constexpr int kClients = 8;
  constexpr int kInFlight = 32;  // concurrent set→get chains per client
  const double seconds = absl::GetFlag(FLAGS_kv_seconds);
  std::vector<double> rates;
  for (int run = 0; run < runs; ++run) {
    auto job = StartCoordinator(kClients, absl::Seconds(10), absl::Seconds(1));
    std::vector<std::unique_ptr<client::CoordinationClientImpl>> clients;
    for (int c = 0; c < kClients; ++c) {
      clients.push_back(BenchClient(*job, c, kClients));
      if (absl::Status s = clients.back()->Connect(absl::Seconds(30)); !s.ok()) {
        std::fprintf(stderr, "bench: kv client: %s\n", s.ToString().c_str());
        return;
      }
    }
    rates.push_back(KvOpsPerSecond(clients, kInFlight, absl::Seconds(seconds)));
  }
  r.kv_ops_per_s = Median(rates);
  std::fprintf(
      stderr, "  kv: %.0f ops/s (%d clients x %d in-flight set-then-get chains, 100-byte values)\n",
      r.kv_ops_per_s, kClients, kInFlight);
}

double MicrosSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
}

// Latency, as a caller sees it: `kConnects` clients connecting one after another (create,
// register, open the session), then 8 synchronous clients (a thread each) setting and getting
// their own keys one call at a time, as the peers bench's KV row does.
void BenchLatency(Results& r, int runs) {
  constexpr int kConnects = 32;
  constexpr int kClients = 8;
  const double seconds = std::min(3.0, absl::GetFlag(FLAGS_kv_seconds));
  std::vector<double> connects, gets, sets;
  for (int run = 0; run < runs; ++run) {
    auto job = StartCoordinator(kConnects, absl::Seconds(10), absl::Seconds(1));
    std::vector<std::unique_ptr<client::CoordinationClientImpl>> clients;
    std::vector<double> connect_ms;
    for (int c = 0; c < kConnects; ++c) {
      const auto t0 = std::chrono::steady_clock::now();
      clients.push_back(BenchClient(*job, c, kConnects));
      if (absl::Status s = clients.back()->Connect(absl::Seconds(30)); !s.ok()) {
        std::fprintf(stderr, "bench: latency client: %s\n", s.ToString().c_str());
        return;
      }
      connect_ms.push_back(MicrosSince(t0) / 1e3);
    }
    connects.push_back(Median(connect_ms));
    std::vector<double> client_gets(kClients), client_sets(kClients);
    std::vector<std::thread> threads;
    for (int c = 0; c < kClients; ++c) {
      threads.emplace_back([&, c] {
        const std::string value(100, 'v');
        std::vector<double> g, s;
        const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
        for (int64_t i = 0; std::chrono::steady_clock::now() < end; ++i) {
          const std::string key = absl::StrCat("lat/", c, "/", i % 1000);
          auto t0 = std::chrono::steady_clock::now();
          if (!clients[c]->KvInsert(key, value, true).ok()) break;
          s.push_back(MicrosSince(t0));
          t0 = std::chrono::steady_clock::now();
          if (!clients[c]->KvGet(key, absl::Seconds(5)).ok()) break;
          g.push_back(MicrosSince(t0));
        }
        client_gets[c] = Median(g);
        client_sets[c] = Median(s);
      });
    }
    for (auto& t : threads) t.join();
    gets.push_back(Median(client_gets));
    sets.push_back(Median(client_sets));
  }
  r.connect_p50_ms = Median(connects);
  r.kv_get_p50_us = Median(gets);
  r.kv_set_p50_us = Median(sets);
  std::fprintf(stderr,
               "  connect: p50 %.2f ms (%d clients one after another); kv, %d synchronous "
               "clients: get p50 %.0f us, set p50 %.0f us\n",
               r.connect_p50_ms, kConnects, kClients, r.kv_get_p50_us, r.kv_set_p50_us);
}

// Starts 4 single-task hosts, hurts task 3 with `sig`, returns when every survivor was told:
// the worst survivor's delay in seconds.
double DetectOnce(int sig, absl::Duration heartbeat_timeout, absl::Duration heartbeat_interval) {
  constexpr int kTasks = 4;
  auto job = StartCoordinator(kTasks, heartbeat_timeout, heartbeat_interval);
  std::vector<std::unique_ptr<process::Subprocess>> hosts;
  for (int t = 0; t < kTasks; ++t)
    hosts.push_back(StartHost("tasks", job->address(), job->options().token,
                              job->options().work_dir, t, 1, kTasks, 0));
  for (auto& h : hosts) {
    if (!h->WaitForLine([](const std::string& l) { return l.rfind("PASS", 0) == 0; },
                        absl::Seconds(60))) {
      return -1;
    }
  }
  const int64_t t_hurt = absl::ToUnixMicros(absl::Now());
  hosts[kTasks - 1]->Signal(sig);
  int64_t worst = 0;
  for (int t = 0; t < kTasks - 1; ++t) {
    auto told = hosts[t]->WaitForLine([](const std::string& l) { return l.rfind("TOLD", 0) == 0; },
                                      heartbeat_timeout + absl::Seconds(30));
    if (!told) return -1;
    worst = std::max(worst, Parse({*told})[0].Int("t_us") - t_hurt);
  }
  if (sig == SIGSTOP) hosts[kTasks - 1]->Signal(SIGKILL);
  for (auto& h : hosts) h->Signal(SIGTERM);
  return worst / 1e6;
}

void BenchDetection(Results& r, int runs, bool crash, bool hang) {
  if (crash) {
    std::vector<double> ms;
    for (int run = 0; run < std::max(runs, 5); ++run) {
      const double s = DetectOnce(SIGKILL, absl::Seconds(10), absl::Seconds(1));
      ms.push_back(s < 0 ? kFailed : s * 1e3);
    }
    r.crash_detect_p50_ms = Median(ms);
    std::fprintf(stderr, "  crash (SIGKILL) → every survivor told: p50 %.1f ms\n",
                 r.crash_detect_p50_ms);
  }
  if (hang) {
    constexpr absl::Duration kHangTimeout = absl::Seconds(2);
    r.hang_timeout_s = absl::ToDoubleSeconds(kHangTimeout);
    std::vector<double> s;
    for (int run = 0; run < runs; ++run) {
      s.push_back(DetectOnce(SIGSTOP, kHangTimeout, absl::Milliseconds(500)));
    }
    r.hang_detect_s = Median(s);
    std::fprintf(stderr, "  hang (SIGSTOP, 2 s timeout) → every survivor told: p50 %.2f s\n",
                 r.hang_detect_s);
  }
}

std::string Json(const Results& r, int runs) {
  // A failed measurement is null, never a number that could pass a "<" target.
  auto num = [](double v, const char* fmt) -> std::string {
    if (v < 0) return "null";
    char buffer[64];
    std::snprintf(buffer, sizeof(buffer), fmt, v);
    return buffer;
  };
  auto map = [&](const std::map<int, double>& m, const char* fmt) {
    std::string out = "{";
    for (const auto& [k, v] : m) {
      if (out.size() > 1) out += ", ";
      out += absl::StrFormat("\"%d\": ", k) + num(v, fmt);
    }
    return out + "}";
  };
  return absl::StrCat(
      "{\n", "  \"rendezvous_s\": ", map(r.rendezvous_s, "%.4f"), ",\n",
      "  \"barrier_p50_ms\": ", map(r.barrier_p50_ms, "%.3f"), ",\n",
      "  \"barrier_reference_ms\": ", map(r.barrier_reference_ms, "%.3f"), ",\n",
      "  \"kv_ops_per_s\": ", num(r.kv_ops_per_s, "%.0f"), ",\n",
      "  \"kv_get_p50_us\": ", num(r.kv_get_p50_us, "%.1f"), ",\n",
      "  \"kv_set_p50_us\": ", num(r.kv_set_p50_us, "%.1f"), ",\n",
      "  \"connect_p50_ms\": ", num(r.connect_p50_ms, "%.3f"), ",\n",
      "  \"crash_detect_p50_ms\": ", num(r.crash_detect_p50_ms, "%.2f"), ",\n",
      "  \"hang_detect_s\": ", num(r.hang_detect_s, "%.3f"), ",\n",
      "  \"hang_timeout_s\": ", num(r.hang_timeout_s, "%.1f"), ",\n",
      "  \"coordinator_rss_mib_1024\": ", num(r.coordinator_rss_mib_1024, "%.1f"), ",\n",
      absl::StrFormat("  \"runs\": %d,\n", runs),
      absl::StrFormat("  \"cores\": %d,\n", static_cast<int>(std::thread::hardware_concurrency())),
      "  \"method\": \"coordinator = phalanx-coordinator process; tasks = threads in up to 8 "
      "task-host processes, sessions on the session wire (one connection per process); kv = 8 "
      "clients x 32 in-flight "
      "set-then-get chains; latency = 32 connects in a row, 8 synchronous set/get clients; "
      "detection = 4 single-task processes, worst survivor; barrier reference = the same hosts "
      "with no service (a byte per arrival, a futex wake per task), run after each barrier "
      "run\"\n}\n");
}

}  // namespace
}  // namespace phalanx::bench

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  phalanx::base::InitProcess("bench");
  using namespace phalanx::bench;
  self_path = std::filesystem::canonical("/proc/self/exe");
  if (absl::GetFlag(FLAGS_role) == "reference") {
    return RunReferenceHost({absl::GetFlag(FLAGS_address), absl::GetFlag(FLAGS_first),
                             absl::GetFlag(FLAGS_count), absl::GetFlag(FLAGS_barriers)});
  }
  if (absl::GetFlag(FLAGS_role) == "tasks") {
    phalanx::client::CoordinatorTls tls;
    if (const std::string ca = absl::GetFlag(FLAGS_tls_ca_file); !ca.empty()) {
      std::ifstream in(ca);
      std::stringstream pem;
      pem << in.rdbuf();
      tls = {pem.str(), phalanx::harness::kLocalJobTlsServerName};
    }
    return RunTaskHost({absl::GetFlag(FLAGS_address), absl::GetFlag(FLAGS_token),
                        absl::GetFlag(FLAGS_first), absl::GetFlag(FLAGS_count),
                        absl::GetFlag(FLAGS_num_tasks), absl::GetFlag(FLAGS_barriers),
                        /*incarnation=*/0, tls});
  }
  const int runs = std::max(1, absl::GetFlag(FLAGS_runs));
  const std::string only = absl::GetFlag(FLAGS_only);
  auto want = [&](const char* name) {
    return only.empty() || only.find(name) != std::string::npos;
  };
  Results r;
  std::fprintf(stderr, "phalanx coordination benchmarks (%d runs each, median)\n", runs);
  if (want("rendezvous")) BenchRendezvous(r, runs);
  if (want("barrier")) BenchBarriers(r, runs);
  if (want("kv")) BenchKv(r, runs);
  if (want("latency")) BenchLatency(r, runs);
  BenchDetection(r, runs, want("crash"), want("hang"));

  std::error_code ec;
  std::filesystem::remove_all(WorkDir(), ec);
  const std::string json = Json(r, runs);
  const std::string out = absl::GetFlag(FLAGS_out);
  std::filesystem::create_directories(std::filesystem::path(out).parent_path());
  std::ofstream(out) << json;

  std::printf("\n| key | measured | target |\n|---|---|---|\n");
  for (const auto& [n, v] : r.rendezvous_s)
    std::printf("| rendezvous_s.%d | %.3f | %s |\n", n, v, n == 1024 ? "< 0.5" : "");
  for (const auto& [n, v] : r.barrier_p50_ms)
    std::printf("| barrier_p50_ms.%d | %.2f | %s |\n", n, v, n == 256 ? "< 4" : "");
  for (const auto& [n, v] : r.barrier_reference_ms)
    std::printf("| barrier_reference_ms.%d | %.2f | |\n", n, v);
  // Only what this run measured: a key left at 0 would read as a result against its target.
  if (want("kv")) std::printf("| kv_ops_per_s | %.0f | >= 60000 |\n", r.kv_ops_per_s);
  if (want("latency")) {
    std::printf("| kv_get_p50_us | %.0f | |\n", r.kv_get_p50_us);
    std::printf("| kv_set_p50_us | %.0f | |\n", r.kv_set_p50_us);
    std::printf("| connect_p50_ms | %.2f | |\n", r.connect_p50_ms);
  }
  if (want("crash")) {
    std::printf("| crash_detect_p50_ms | %.1f | < 100 |\n", r.crash_detect_p50_ms);
  }
  if (want("hang")) {
    std::printf("| hang_detect_s (hang_timeout_s %.1f) | %.2f | <= %.1f |\n", r.hang_timeout_s,
                r.hang_detect_s, r.hang_timeout_s + 0.5);
  }
  if (want("rendezvous")) {
    std::printf("| coordinator_rss_mib_1024 | %.1f | < 128 |\n", r.coordinator_rss_mib_1024);
  }
  std::printf("\nwritten to %s\n", out.c_str());
  return 0;
}
