// phalanx-coord-scale-bench: one coordinator at 1,024 to 16,384 tasks (issue 33 item 1). The
// tasks are swarm hosts (swarm_host.h: thousands of sessions on one thread and one connection
// per process), so the machine's thread limit is not the limit measured. Per N, in one run:
// rendezvous, barrier rounds (and the reference barrier's, from the same host layout, right
// after), the coordinator's RSS and idle CPU with N sessions heartbeating, key-value throughput
// from 8 real clients while the N sessions are open, crash detection (five single-task
// processes SIGKILLed one at a time), and a mass disconnect (half the hosts SIGKILLed) with the
// re-registration of their tasks at the next incarnation. At 1,024 and 4,096 the thread-per-task
// host (task_host.h, the real client library) runs the rendezvous and barriers too, so the two
// harnesses can be compared. Writes JSON (--out); bench/scale.py draws it.
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "bench/barrier_reference.h"
#include "bench/coordination_workload.h"
#include "bench/measure_util.h"
#include "bench/swarm_host.h"
#include "bench/task_host.h"
#include "common/base/process_init.h"
#include "common/process/subprocess.h"
#include "examples/local_job/local_job.h"
#include "runtime/client/coordination_client_impl.h"

ABSL_FLAG(std::string, bin_dir, "build", "build directory");
ABSL_FLAG(std::string, out, "build/bench/scale_coordinator.json", "where the JSON goes");
ABSL_FLAG(std::string, tasks, "1024,4096,16384", "comma-separated task counts");
ABSL_FLAG(int, runs, 1, "runs per task count (the median is reported)");
ABSL_FLAG(int, barriers, 10, "barrier rounds timed after the rendezvous");
ABSL_FLAG(double, kv_seconds, 3, "duration of the key-value workload under load");
ABSL_FLAG(bool, compare_threads, true,
          "also run the thread-per-task host (real clients) at N <= 4096");
ABSL_FLAG(std::string, role, "driver",
          "driver | swarm | reference | reference_swarm | tasks (internal: a host process)");
ABSL_FLAG(std::string, address, "", "host roles: coordinator (or reference server) address");
ABSL_FLAG(std::string, token, "", "host roles: job token");
ABSL_FLAG(int, first, 0, "host roles: first task id");
ABSL_FLAG(int, count, 1, "host roles: how many tasks");
ABSL_FLAG(int, num_tasks, 1, "host roles: tasks in the job");
ABSL_FLAG(int, host_barriers, 0, "host roles: barriers after the rendezvous (-1: none)");
ABSL_FLAG(int64_t, incarnation, 0, "host roles: the tasks' incarnation");

namespace phalanx::bench {
namespace {

using harness::LocalJob;

constexpr int kKvClients = 8;  // real clients: key-value load under N open sessions
constexpr int kVictims = 5;    // single-task processes, SIGKILLed one at a time
constexpr absl::Duration kWait = absl::Seconds(300);

std::string self_path;

// `key=<int>` in a host's output line; -1 if absent.
int64_t Field(const std::string& line, absl::string_view key) {
  for (absl::string_view part : absl::StrSplit(line, ' ')) {
    if (absl::StartsWith(part, key) && part.size() > key.size() && part[key.size()] == '=') {
      int64_t v = -1;
      if (absl::SimpleAtoi(part.substr(key.size() + 1), &v)) return v;
    }
  }
  return -1;
}

bool Starts(const std::string& line, absl::string_view kind) {
  return absl::StartsWith(line, kind);
}

std::string WorkDir() {
  return std::filesystem::temp_directory_path() / absl::StrCat("phalanx-scale-bench-", getpid());
}

struct Host {
  std::unique_ptr<process::Subprocess> process;
  int first = 0;
  int count = 0;
};

Host StartHost(const std::string& role, const std::string& address, const std::string& token,
               int first, int count, int num_tasks, int barriers,
               base::Incarnation incarnation = 0) {
  process::SubprocessOptions options;
  options.argv = {self_path,
                  "--role=" + role,
                  "--address=" + address,
                  "--token=" + token,
                  absl::StrCat("--first=", first),
                  absl::StrCat("--count=", count),
                  absl::StrCat("--num_tasks=", num_tasks),
                  absl::StrCat("--host_barriers=", barriers),
                  absl::StrCat("--incarnation=", incarnation)};
  options.stderr_path = WorkDir() + "/hosts.log";
  auto p = process::Subprocess::Start(options);
  if (!p.ok()) {
    std::fprintf(stderr, "scale: %s\n", p.status().ToString().c_str());
    std::exit(1);
  }
  return Host{*std::move(p), first, count};
}

// How many of `host`'s lines satisfy `match`, waiting (up to the deadline) until there are
// `want`; an ERROR line ends the wait (false, printed).
bool WaitForLines(Host& host, const std::function<bool(const std::string&)>& match, size_t want,
                  absl::Time deadline) {
  size_t seen_lines = 0;
  bool exited = false;
  while (true) {
    // A host that exited has all of its lines read once Wait() returns.
    if (host.process->ExitCode().has_value())
      exited = host.process->Wait(absl::Seconds(5)).has_value();
    std::vector<std::string> lines = host.process->Lines();
    size_t n = 0;
    for (const std::string& l : lines) {
      if (Starts(l, "ERROR")) {
        std::fprintf(stderr, "scale: host of tasks %d..%d: %s\n", host.first,
                     host.first + host.count - 1, l.c_str());
        return false;
      }
      if (match(l)) ++n;
    }
    if (n >= want) return true;
    if (absl::Now() >= deadline || exited) {
      std::fprintf(stderr, "scale: host of tasks %d..%d: %zu of %zu lines by the deadline\n",
                   host.first, host.first + host.count - 1, n, want);
      return false;
    }
    seen_lines = lines.size();
    host.process->WaitForLine([](const std::string&) { return true; },
                              std::min(absl::Seconds(1), deadline - absl::Now()), seen_lines);
  }
}

// Per barrier (-1 = the rendezvous), when the last task of all `hosts` passed it: PASS lines
// (task_host.h, a line per task) and ROUND lines (swarm_host.h, a line per host) alike.
std::map<int, int64_t> LastPasses(std::vector<Host>& hosts) {
  std::map<int, int64_t> last;
  for (Host& h : hosts) {
    for (const std::string& l : h.process->Lines()) {
      if (!Starts(l, "PASS") && !Starts(l, "ROUND")) continue;
      const int b = static_cast<int>(Field(l, "barrier"));
      last[b] = std::max(last[b], Field(l, "t_us"));
    }
  }
  return last;
}

// Rounds from `last` (barriers 0..n-1, each from the one before): their median, ms.
double MedianRoundMs(const std::map<int, int64_t>& last, int barriers) {
  std::vector<double> rounds;
  for (int b = 0; b < barriers; ++b) {
    auto prev = last.find(b - 1), cur = last.find(b);
    if (prev == last.end() || cur == last.end()) return kFailed;
    rounds.push_back((cur->second - prev->second) / 1e3);
  }
  return Median(rounds);
}

void StopHosts(std::vector<Host>& hosts) {
  for (Host& h : hosts) h.process->Signal(SIGTERM);
  for (Host& h : hosts) {
    if (!h.process->Wait(absl::Seconds(20)).has_value()) h.process->Signal(SIGKILL);
  }
  hosts.clear();
}

// Swarm host processes for n tasks: up to 8 (one per 256 tasks); 16,384 tasks are 2,048 each.
int HostsFor(int n) { return std::clamp(n / 256, 1, 8); }

struct Point {
  int tasks = 0;
  int hosts = 0;
  double rendezvous_s = kFailed;
  double barrier_round_ms = kFailed;
  double barrier_reference_ms = kFailed;
  double barrier_reference_swarm_ms = kFailed;
  double rss_mib = kFailed;
  double idle_cpu_pct = kFailed;
  double kv_ops_per_s = kFailed;
  double crash_detect_p50_ms = kFailed;
  double mass_disconnect_tasks = kFailed;
  double mass_detect_s = kFailed;
  double reregister_s = kFailed;
  double rss_after_mass_mib = kFailed;
  double threads_rendezvous_s = kFailed;
  double threads_barrier_round_ms = kFailed;
};

// The reference barrier's median round for n tasks in `hosts` processes: `role` reference
// (a thread per task, barrier_reference.h, the coordination bench's barrier_reference_ms) or
// reference_swarm (one thread a process: bytes only, the floor).
double ReferenceRoundMs(const std::string& role, int n, int hosts, int barriers) {
  auto server = ReferenceBarrierServer::Start(n);
  if (!server.ok()) return kFailed;
  std::vector<Host> refs;
  for (int h = 0; h < hosts; ++h) {
    const int first = n * h / hosts, last = n * (h + 1) / hosts;
    refs.push_back(StartHost(role, (*server)->address(), "", first, last - first, n, barriers));
  }
  const bool swarm = role == "reference_swarm";
  const absl::Time deadline = absl::Now() + kWait;
  for (Host& h : refs) {
    const size_t want = static_cast<size_t>(swarm ? 1 : h.count) * (barriers + 1);
    if (!WaitForLines(
            h, [](const std::string& l) { return Starts(l, "ROUND") || Starts(l, "PASS"); }, want,
            deadline)) {
      StopHosts(refs);
      return kFailed;
    }
  }
  const double ms = MedianRoundMs(LastPasses(refs), barriers);
  StopHosts(refs);
  return ms;
}

std::unique_ptr<LocalJob> StartCoordinator(int n) {
  return StartBenchCoordinator(absl::GetFlag(FLAGS_bin_dir), WorkDir(), n, absl::Seconds(10),
                               absl::Seconds(1));
}

// The whole sequence for n tasks against one fresh coordinator.
Point MeasureSwarm(int n) {
  const int barriers = absl::GetFlag(FLAGS_barriers);
  Point p;
  p.tasks = n;
  p.hosts = HostsFor(n);
  auto job = StartCoordinator(n);
  const std::string address = job->address(), token = job->options().token;
  const int swarm_tasks = n - kKvClients - kVictims;
  const absl::Time deadline = absl::Now() + kWait;

  const int64_t t0 = NowMicros();
  std::vector<Host> hosts;
  for (int h = 0; h < p.hosts; ++h) {
    const int first = swarm_tasks * h / p.hosts, last = swarm_tasks * (h + 1) / p.hosts;
    hosts.push_back(StartHost("swarm", address, token, first, last - first, n, barriers));
  }
  std::vector<Host> victims;
  for (int v = 0; v < kVictims; ++v) {
    victims.push_back(StartHost("tasks", address, token, n - kVictims + v, 1, n, barriers));
  }
  // The key-value clients are tasks of the gang too: they pass the same barriers.
  std::vector<std::unique_ptr<client::CoordinationClientImpl>> clients;
  std::vector<std::thread> passers;
  std::atomic<bool> clients_ok{true};
  for (int c = 0; c < kKvClients; ++c) {
    clients.push_back(BenchClient(*job, swarm_tasks + c, n));
    passers.emplace_back([&, c] {
      auto& client = *clients[c];
      if (!client.Connect(absl::Seconds(120)).ok()) clients_ok = false;
      for (int b = -1; b < barriers && clients_ok; ++b) {
        if (!client.Barrier(absl::StrCat("b", b), absl::Seconds(120)).ok()) clients_ok = false;
      }
    });
  }
  bool ok = true;
  for (Host& h : hosts) {
    ok = ok &&
         WaitForLines(
             h, [](const std::string& l) { return Starts(l, "ROUND"); }, barriers + 1, deadline);
  }
  for (Host& h : victims) {
    ok = ok &&
         WaitForLines(
             h, [](const std::string& l) { return Starts(l, "PASS"); }, barriers + 1, deadline);
  }
  for (std::thread& t : passers) t.join();
  if (!ok || !clients_ok) {
    std::fprintf(stderr, "scale: %d tasks: the gang did not pass its barriers\n", n);
    StopHosts(victims);
    StopHosts(hosts);
    return p;
  }
  std::map<int, int64_t> last = LastPasses(hosts);
  for (auto& [b, t] : LastPasses(victims)) last[b] = std::max(last[b], t);
  p.rendezvous_s = (last[-1] - t0) / 1e6;
  p.barrier_round_ms = MedianRoundMs(last, barriers);
  p.barrier_reference_ms = ReferenceRoundMs("reference", n, p.hosts, barriers);
  p.barrier_reference_swarm_ms = ReferenceRoundMs("reference_swarm", n, p.hosts, barriers);
  std::fprintf(stderr,
               "  %5d tasks: rendezvous %.3f s, barrier round %.2f ms (reference: a thread per "
               "task %.2f, one thread per host %.2f)\n",
               n, p.rendezvous_s, p.barrier_round_ms, p.barrier_reference_ms,
               p.barrier_reference_swarm_ms);

  const pid_t coordinator = job->coordinator().pid();
  p.rss_mib = RssMib(coordinator);
  constexpr absl::Duration kIdle = absl::Seconds(5);
  const double cpu0 = CpuSeconds(coordinator);
  absl::SleepFor(kIdle);
  const double cpu1 = CpuSeconds(coordinator);
  p.idle_cpu_pct = 100 * (cpu1 - cpu0) / absl::ToDoubleSeconds(kIdle);
  p.kv_ops_per_s =
      KvOpsPerSecond(clients, /*in_flight=*/32, absl::Seconds(absl::GetFlag(FLAGS_kv_seconds)));
  std::fprintf(stderr, "  %5d tasks: RSS %.1f MiB, idle CPU %.2f %% (heartbeats), kv %.0f ops/s\n",
               n, p.rss_mib, p.idle_cpu_pct, p.kv_ops_per_s);

  // Crash detection: each victim SIGKILLed in turn; when the last swarm host heard of it.
  std::vector<double> detect_ms;
  for (Host& v : victims) {
    const int task = v.first;
    const int64_t t_kill = NowMicros();
    v.process->Signal(SIGKILL);
    auto told = [task](const std::string& l) {
      return Starts(l, "TOLD") && Field(l, "peer") == task;
    };
    int64_t worst = 0;
    for (Host& h : hosts) {
      if (!WaitForLines(h, told, 1, absl::Now() + absl::Seconds(30))) {
        worst = -1;
        break;
      }
      for (const std::string& l : h.process->Lines()) {
        if (told(l)) worst = std::max(worst, Field(l, "t_us") - t_kill);
      }
    }
    detect_ms.push_back(worst < 0 ? kFailed : worst / 1e3);
    absl::SleepFor(absl::Milliseconds(300));
  }
  p.crash_detect_p50_ms = Median(detect_ms);

  // Mass disconnect: the first half of the hosts SIGKILLed at once.
  const int killed_hosts = std::max(1, p.hosts / 2);
  std::vector<Host> gone(std::make_move_iterator(hosts.begin()),
                         std::make_move_iterator(hosts.begin() + killed_hosts));
  hosts.erase(hosts.begin(), hosts.begin() + killed_hosts);
  int killed_tasks = 0;
  for (Host& h : gone) killed_tasks += h.count;
  p.mass_disconnect_tasks = killed_tasks;
  const int64_t t_kill = NowMicros();
  for (Host& h : gone) h.process->Signal(SIGKILL);
  const int last_killed = gone.back().first + gone.back().count - 1;
  auto told_of_killed = [last_killed](const std::string& l) {
    return Starts(l, "TOLD") && Field(l, "peer") >= 0 && Field(l, "peer") <= last_killed;
  };
  int64_t worst = 0;
  for (Host& h : hosts) {
    if (!WaitForLines(h, told_of_killed, killed_tasks, absl::Now() + absl::Seconds(120))) {
      worst = -1;
      break;
    }
    for (const std::string& l : h.process->Lines()) {
      if (told_of_killed(l)) worst = std::max(worst, Field(l, "t_us") - t_kill);
    }
  }
  if (worst >= 0) p.mass_detect_s = worst / 1e6;
  for (Host& h : gone) h.process->Wait(absl::Seconds(10));
  // Their tasks come back at the next incarnation and open their sessions.
  const int64_t t_back = NowMicros();
  std::vector<Host> back;
  for (Host& h : gone)
    back.push_back(StartHost("swarm", address, token, h.first, h.count, n, -1, 1));
  int64_t last_open = 0;
  for (Host& h : back) {
    if (!WaitForLines(
            h, [](const std::string& l) { return Starts(l, "OPENED"); }, 1,
            absl::Now() + absl::Seconds(120))) {
      last_open = -1;
      break;
    }
    for (const std::string& l : h.process->Lines()) {
      if (Starts(l, "OPENED")) last_open = std::max(last_open, Field(l, "t_us"));
    }
  }
  if (last_open > 0) p.reregister_s = (last_open - t_back) / 1e6;
  p.rss_after_mass_mib = RssMib(coordinator);
  std::fprintf(stderr,
               "  %5d tasks: crash detect p50 %.1f ms; %d tasks killed: all told in %.3f s, "
               "back in %.3f s; RSS %.1f MiB\n",
               n, p.crash_detect_p50_ms, killed_tasks, p.mass_detect_s, p.reregister_s,
               p.rss_after_mass_mib);
  clients.clear();
  StopHosts(back);
  StopHosts(hosts);
  StopHosts(victims);
  return p;
}

// The thread-per-task host (real clients) at the same N: rendezvous and barrier rounds.
void MeasureThreads(int n, Point& p) {
  const int barriers = absl::GetFlag(FLAGS_barriers);
  auto job = StartCoordinator(n);
  const int hosts_n = std::clamp(n / 32, 1, 8);
  const int64_t t0 = NowMicros();
  std::vector<Host> hosts;
  for (int h = 0; h < hosts_n; ++h) {
    const int first = n * h / hosts_n, last = n * (h + 1) / hosts_n;
    hosts.push_back(
        StartHost("tasks", job->address(), job->options().token, first, last - first, n, barriers));
  }
  const absl::Time deadline = absl::Now() + kWait;
  for (Host& h : hosts) {
    if (!WaitForLines(
            h, [](const std::string& l) { return Starts(l, "PASS"); },
            static_cast<size_t>(h.count) * (barriers + 1), deadline)) {
      StopHosts(hosts);
      return;
    }
  }
  std::map<int, int64_t> last = LastPasses(hosts);
  p.threads_rendezvous_s = (last[-1] - t0) / 1e6;
  p.threads_barrier_round_ms = MedianRoundMs(last, barriers);
  std::fprintf(stderr, "  %5d tasks, a thread each: rendezvous %.3f s, barrier round %.2f ms\n", n,
               p.threads_rendezvous_s, p.threads_barrier_round_ms);
  StopHosts(hosts);
}

Point MedianOf(std::vector<Point> runs) {
  Point m = runs[0];
  auto med = [&](double Point::*field) {
    std::vector<double> v;
    for (const Point& r : runs) v.push_back(r.*field);
    m.*field = Median(v);
  };
  for (double Point::*f :
       {&Point::rendezvous_s, &Point::barrier_round_ms, &Point::barrier_reference_ms,
        &Point::barrier_reference_swarm_ms, &Point::rss_mib, &Point::idle_cpu_pct,
        &Point::kv_ops_per_s, &Point::crash_detect_p50_ms, &Point::mass_disconnect_tasks,
        &Point::mass_detect_s, &Point::reregister_s, &Point::rss_after_mass_mib,
        &Point::threads_rendezvous_s, &Point::threads_barrier_round_ms}) {
    med(f);
  }
  return m;
}

std::string Json(const std::vector<Point>& points, int runs) {
  std::vector<std::string> rows;
  for (const Point& p : points) {
    rows.push_back(absl::StrCat(
        "    {\"tasks\": ", p.tasks, ", \"hosts\": ", p.hosts,
        ", \"rendezvous_s\": ", JsonNumber(p.rendezvous_s, 4),
        ", \"barrier_round_ms\": ", JsonNumber(p.barrier_round_ms, 3),
        ", \"barrier_reference_ms\": ", JsonNumber(p.barrier_reference_ms, 3),
        ", \"barrier_reference_swarm_ms\": ", JsonNumber(p.barrier_reference_swarm_ms, 3),
        ", \"rss_mib\": ", JsonNumber(p.rss_mib, 1), ", \"idle_cpu_pct\": ",
        JsonNumber(p.idle_cpu_pct, 2), ", \"kv_ops_per_s\": ", JsonNumber(p.kv_ops_per_s, 0),
        ", \"crash_detect_p50_ms\": ", JsonNumber(p.crash_detect_p50_ms, 2),
        ", \"mass_disconnect_tasks\": ", JsonNumber(p.mass_disconnect_tasks, 0),
        ", \"mass_detect_s\": ", JsonNumber(p.mass_detect_s, 4),
        ", \"reregister_s\": ", JsonNumber(p.reregister_s, 4),
        ", \"rss_after_mass_mib\": ", JsonNumber(p.rss_after_mass_mib, 1),
        ", \"threads_rendezvous_s\": ", JsonNumber(p.threads_rendezvous_s, 4),
        ", \"threads_barrier_round_ms\": ", JsonNumber(p.threads_barrier_round_ms, 3), "}"));
  }
  return absl::StrCat(
      "{\n  \"points\": [\n", absl::StrJoin(rows, ",\n"), "\n  ],\n",
      absl::StrFormat("  \"runs\": %d,\n  \"barriers\": %d,\n  \"cores\": %d,\n", runs,
                      absl::GetFlag(FLAGS_barriers),
                      static_cast<int>(std::thread::hardware_concurrency())),
      "  \"method\": \"one phalanx-coordinator process per N; tasks = swarm hosts (one thread "
      "and one session-wire connection per process, a stream per task) plus 8 real clients "
      "(kv load) and 5 single-task processes (crash victims); barrier_reference_ms = the "
      "reference barrier (barrier_reference.h) with a thread per task in the same number of "
      "host processes; barrier_reference_swarm_ms = the same with one thread per host (bytes "
      "only); threads_* = the thread-per-task host with the real client library\"\n}\n");
}

}  // namespace
}  // namespace phalanx::bench

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  phalanx::base::InitProcess("scale-bench");
  using namespace phalanx::bench;
  self_path = std::filesystem::canonical("/proc/self/exe");
  const std::string role = absl::GetFlag(FLAGS_role);
  TaskHostOptions host{absl::GetFlag(FLAGS_address),    absl::GetFlag(FLAGS_token),
                       absl::GetFlag(FLAGS_first),      absl::GetFlag(FLAGS_count),
                       absl::GetFlag(FLAGS_num_tasks),  absl::GetFlag(FLAGS_host_barriers),
                       absl::GetFlag(FLAGS_incarnation)};
  if (role == "swarm") return RunSwarmHost(host);
  if (role == "reference_swarm") return RunReferenceSwarmHost(host);
  if (role == "reference") {
    return RunReferenceHost({host.address, host.first, host.count, host.barriers});
  }
  if (role == "tasks") {
    return RunTaskHost(
        {host.address, host.token, host.first, host.count, host.num_tasks, host.barriers});
  }
  std::filesystem::create_directories(WorkDir());
  std::vector<int> sizes;
  for (absl::string_view s : absl::StrSplit(absl::GetFlag(FLAGS_tasks), ',', absl::SkipEmpty())) {
    int n = 0;
    if (!absl::SimpleAtoi(s, &n) || n < 64) {
      std::fprintf(stderr, "scale: --tasks wants numbers >= 64, got '%s'\n",
                   std::string(s).c_str());
      return 2;
    }
    sizes.push_back(n);
  }
  const int runs = std::max(1, absl::GetFlag(FLAGS_runs));
  std::fprintf(stderr, "phalanx coordinator at scale (%d run(s) per N)\n", runs);
  std::vector<Point> points;
  for (int n : sizes) {
    std::vector<Point> at_n;
    for (int run = 0; run < runs; ++run) {
      Point p = MeasureSwarm(n);
      if (absl::GetFlag(FLAGS_compare_threads) && n <= 4096) MeasureThreads(n, p);
      at_n.push_back(p);
    }
    points.push_back(MedianOf(at_n));
  }
  std::error_code ec;
  std::filesystem::remove_all(WorkDir(), ec);
  const std::string out = absl::GetFlag(FLAGS_out);
  std::filesystem::create_directories(std::filesystem::path(out).parent_path());
  std::ofstream(out) << Json(points, runs);
  std::fprintf(stderr, "written to %s\n", out.c_str());
  return 0;
}
