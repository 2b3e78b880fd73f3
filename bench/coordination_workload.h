// What the coordination benches (coordination_bench.cc, coordinator_scale_bench.cc) share: a
// bench job's coordinator (the real binary, no workers), its real clients, and the key-value
// load (set→get chains on the clients' completion threads, so one client keeps several
// operations in flight without a thread per operation). Header-only.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "examples/local_job/local_job.h"
#include "runtime/client/coordination_client_impl.h"

namespace phalanx::bench {

// A fresh coordinator of the job "bench" with `num_tasks` tasks (serving TLS with `tls`, as the
// operator's are by default); exits the bench if it cannot start (a bench run without its
// coordinator measures nothing).
inline std::unique_ptr<harness::LocalJob> StartBenchCoordinator(
    const std::string& bin_dir, const std::string& work_dir, int num_tasks,
    absl::Duration heartbeat_timeout, absl::Duration heartbeat_interval, bool tls = false) {
  harness::LocalJobOptions options;
  options.bin_dir = bin_dir;
  options.work_dir = work_dir;
  options.job = "bench";
  options.num_tasks = num_tasks;
  options.heartbeat_timeout = heartbeat_timeout;
  options.heartbeat_interval = heartbeat_interval;
  options.start_workers = false;
  options.tls = tls;
  auto job = harness::LocalJob::Start(options);
  if (!job.ok()) {
    std::fprintf(stderr, "bench: %s\n", job.status().ToString().c_str());
    std::exit(1);
  }
  return *std::move(job);
}

// A client of the bench job for `task` (created, not connected).
inline std::unique_ptr<client::CoordinationClientImpl> BenchClient(const harness::LocalJob& job,
                                                                   int task, int num_tasks) {
  client::ClientConfig config;
  config.coordinator = job.address();
  config.job = "bench";
  config.task_id = task;
  config.num_tasks = num_tasks;
  config.token = job.options().token;
  config.tls = job.ClientTls();
  return *client::CoordinationClientImpl::Create(config);
}

// One set→get chain: inserts a key, reads it back, and starts over until `stop`.
struct KvChain {
  client::CoordinationClientImpl* client;
  std::string prefix;
  const std::string* value;
  std::atomic<bool>* stop;
  std::atomic<int64_t>* ops;  // +2 per completed set→get
  std::atomic<int>* running;  // decremented when this chain sees `stop`
  int64_t i = 0;

  void Next() {
    if (stop->load(std::memory_order_relaxed)) {
      --*running;
      return;
    }
    const std::string key = absl::StrCat(prefix, i++ % 1000);
    client->KvInsertAsync(key, *value, true, [this, key](absl::Status s) {
      if (!s.ok()) return Next();
      client->KvGetAsync(key, absl::Seconds(5), [this](absl::StatusOr<std::string> got) {
        if (got.ok()) *ops += 2;
        Next();
      });
    });
  }
};

// Key-value operations per second from `clients` (connected), each running `in_flight` chains
// of 100-byte values for `duration`; waits (up to 30 s) for the chains to stop before returning.
inline double KvOpsPerSecond(
    const std::vector<std::unique_ptr<client::CoordinationClientImpl>>& clients, int in_flight,
    absl::Duration duration) {
  std::atomic<int64_t> ops{0};
  std::atomic<bool> stop{false};
  std::atomic<int> running{static_cast<int>(clients.size()) * in_flight};
  const std::string value(100, 'v');
  std::vector<std::unique_ptr<KvChain>> chains;
  const absl::Time start = absl::Now();
  for (size_t c = 0; c < clients.size(); ++c) {
    for (int w = 0; w < in_flight; ++w) {
      chains.push_back(std::make_unique<KvChain>(KvChain{
          clients[c].get(), absl::StrCat("kv/", c, "/", w, "/"), &value, &stop, &ops, &running}));
      chains.back()->Next();
    }
  }
  absl::SleepFor(duration);
  stop = true;
  const double elapsed = absl::ToDoubleSeconds(absl::Now() - start);
  const int64_t counted = ops.load();
  const absl::Time drain = absl::Now() + absl::Seconds(30);
  while (running.load() > 0 && absl::Now() < drain) absl::SleepFor(absl::Milliseconds(10));
  return counted / elapsed;
}

}  // namespace phalanx::bench
