// phalanx-coord-memory-bench: how much memory a real phalanx-coordinator process holds for a
// full key-value store and how much it hands back after the keys are deleted (issue 16 item 2:
// "memory is not returned after deletes"). Starts the coordinator, fills the store through the
// gRPC client with many small values (the case the heap keeps: large values are mmapped and
// always go back), deletes them, and prints the coordinator's VmRSS at each step.
//
//   phalanx-coord-memory-bench --coordinator build/runtime/coordination/phalanx-coordinator
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
#include "common/process/subprocess.h"
#include "runtime/client/grpc_client.h"

ABSL_FLAG(std::string, coordinator, "build/runtime/coordination/phalanx-coordinator",
          "the phalanx-coordinator binary");
ABSL_FLAG(int, values, 60'000, "values to insert (the default key quota is 100,000)");
ABSL_FLAG(int, value_bytes, 1000, "bytes per value (small: the heap, not mmap, holds them)");
ABSL_FLAG(int, rounds, 2, "fill-and-delete rounds");

namespace {

double RssMib(pid_t pid) {
  std::ifstream status(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(status, line)) {
    int64_t kib = 0;
    if (absl::StartsWith(line, "VmRSS:") &&
        absl::SimpleAtoi(absl::StripAsciiWhitespace(absl::StripSuffix(line.substr(6), "kB")),
                         &kib)) {
      return static_cast<double>(kib) / 1024.0;
    }
  }
  return -1;
}

// Inserts `count` values under "mem/", at most 256 in flight; false on any failure.
bool Fill(phalanx::client::GrpcCoordinationClient& client, int count, const std::string& value) {
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

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
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
  auto client = phalanx::client::GrpcCoordinationClient::Create(config, {});
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
