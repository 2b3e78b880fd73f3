// phalanx-coord-memory-bench: how much memory a real phalanx-coordinator process holds for a
// full key-value store and how much it hands back after the keys are deleted (issue 16 item 2:
// "memory is not returned after deletes"). Starts the coordinator, fills the store through the
// gRPC client with many small values (the case the heap keeps: large values are mmapped and
// always go back), deletes them, and prints the coordinator's VmRSS at each step.
//
// With --fanout_tasks N it measures instead what a mass failure costs (item 2's O(N²) fan-out):
// an in-process service with N sessions whose transports do not drain (the worst case: stalled
// or slow survivors), half of them dropped at once; prints this process's RSS before and after.
//
//   phalanx-coord-memory-bench --coordinator build/runtime/coordination/phalanx-coordinator
//   phalanx-coord-memory-bench --fanout_tasks 3000
#include <signal.h>

#include <atomic>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/blocking_counter.h"
#include "bench/bench_util.h"
#include "common/base/clock.h"
#include "common/process/subprocess.h"
#include "prometheus/registry.h"
#include "runtime/client/coordination_client_impl.h"
#include "runtime/coordination/service.h"

ABSL_FLAG(std::string, coordinator, "build/runtime/coordination/phalanx-coordinator",
          "the phalanx-coordinator binary");
ABSL_FLAG(int, values, 60'000, "values to insert (the default key quota is 100,000)");
ABSL_FLAG(int, value_bytes, 1000, "bytes per value (small: the heap, not mmap, holds them)");
ABSL_FLAG(int, rounds, 2, "fill-and-delete rounds");
ABSL_FLAG(int, fanout_tasks, 0, "> 0: measure a mass drop of half of this many sessions instead");

namespace {

using ::phalanx::bench::RssMib;

// Inserts `count` values under "mem/", at most 256 in flight; false on any failure.
bool Fill(phalanx::client::CoordinationClientImpl& client, int count, const std::string& value) {
  std::atomic<int> failed{0};
  for (int start = 0; start < count; start += 256) {
    const int batch = std::min(256, count - start);
    absl::BlockingCounter done(batch);
    for (int i = start; i < start + batch; ++i) {
      client.KvInsertAsync(absl::StrCat("mem/", i), value, true, [&](absl::Status s) {
        if (!s.ok()) {
          if (failed.fetch_add(1) == 0) std::fprintf(stderr, "insert: %s\n", s.ToString().c_str());
        }
        done.DecrementCount();
      });
    }
    done.Wait();
  }
  return failed.load() == 0;
}

// N sessions, the last N/2 dropped at once; the survivors' queues are never drained.
int MeasureFanout(int n) {
  prometheus::Registry registry;
  phalanx::coord::CoordinatorMetrics metrics(registry);
  phalanx::coord::CoordinationService::Options options;
  options.num_tasks = n;
  auto service = phalanx::coord::CoordinationService::Create(
      options, phalanx::base::RealClock::Get(), metrics);
  if (!service.ok()) return 1;
  std::vector<std::shared_ptr<phalanx::coord::SessionOutbox>> outboxes;
  std::vector<uint64_t> sessions;
  for (int i = 0; i < n; ++i) {
    if (!(*service)->Register({i, 0}).ok()) return 1;
    outboxes.push_back(std::make_shared<phalanx::coord::SessionOutbox>());
    auto session = (*service)->OpenSession({i, 0}, outboxes.back());
    if (!session.ok()) return 1;
    sessions.push_back(*session);
  }
  const double before = RssMib(getpid());
  const absl::Time start = absl::Now();
  for (int i = n / 2; i < n; ++i) {
    (*service)->CloseSession(sessions[i], absl::UnavailableError("killed"));
    outboxes[i].reset();  // its transport is gone
  }
  (*service)->Tick(absl::Now());
  const absl::Duration took = absl::Now() - start;
  std::printf("%d sessions, %d dropped at once: RSS %.1f -> %.1f MiB (+%.1f), %.0f ms\n", n,
              n - n / 2, before, RssMib(getpid()), RssMib(getpid()) - before,
              absl::ToDoubleMilliseconds(took));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  if (const int n = absl::GetFlag(FLAGS_fanout_tasks); n > 0) return MeasureFanout(n);
  const std::string token_path = "/tmp/phalanx-coord-memory-bench.token";
  std::ofstream(token_path) << "bench-token";
  phalanx::process::SubprocessOptions options;
  options.argv = {
      absl::GetFlag(FLAGS_coordinator), "--job=mem",         "--num_tasks=1",
      "--listen=127.0.0.1:0",           "--metrics_listen=", "--token_file=" + token_path};
  options.stderr_path = "/tmp/phalanx-coord-memory-bench.log";
  auto coordinator = phalanx::process::Subprocess::Start(options);
  if (!coordinator.ok()) {
    std::fprintf(stderr, "cannot start %s\n", options.argv[0].c_str());
    return 1;
  }
  std::optional<std::string> ready =
      (*coordinator)
          ->WaitForLine([](const std::string& l) { return absl::StartsWith(l, "ready "); },
                        absl::Seconds(60));
  if (!ready.has_value()) {
    std::fprintf(stderr, "coordinator did not start (log: %s)\n", options.stderr_path.c_str());
    return 1;
  }
  // "ready grpc=HOST:PORT metrics=..."
  const std::string grpc = ready->substr(11, ready->find(' ', 11) - 11);
  phalanx::client::ClientConfig config;
  config.coordinator = grpc;
  config.job = "mem";
  config.num_tasks = 1;
  config.token = "bench-token";
  auto client = phalanx::client::CoordinationClientImpl::Create(config, {});
  if (!client.ok() || !(*client)->Connect(absl::Seconds(30)).ok()) {
    std::fprintf(stderr, "cannot connect to %s\n", grpc.c_str());
    return 1;
  }
  const pid_t pid = (*coordinator)->pid();
  const std::string value(absl::GetFlag(FLAGS_value_bytes), 'v');
  const int count = absl::GetFlag(FLAGS_values);
  std::printf("%d values of %zu bytes (%.1f MiB of data)\n", count, value.size(),
              count * (value.size() + 10) / 1048576.0);
  std::printf("%-28s %10s\n", "step", "RSS MiB");
  std::printf("%-28s %10.1f\n", "started", RssMib(pid));
  int status = 0;
  for (int round = 1; round <= absl::GetFlag(FLAGS_rounds); ++round) {
    if (!Fill(**client, count, value)) status = 1;
    std::printf("%-28s %10.1f\n", absl::StrCat("round ", round, ": filled").c_str(), RssMib(pid));
    absl::StatusOr<int> deleted = (*client)->KvDelete("mem");
    if (!deleted.ok() || *deleted != count) status = 1;
    std::printf("%-28s %10.1f\n", absl::StrCat("round ", round, ": deleted").c_str(), RssMib(pid));
  }
  client->reset();
  (*coordinator)->Signal(SIGTERM);
  (*coordinator)->Wait(absl::Seconds(20));
  return status;
}
