// phalanx-peer-worker: one client process of bench/peers_bench.py for the C++ client: `count`
// tasks as threads, each with its own CoordinationClientImpl (its own connection). It speaks the
// protocol of bench/peer_worker.py (see there): READY, then GO on stdin, then PASS or KV lines,
// DONE, and the connections stay open until stdin closes. So the driver times the C++ client,
// the Python client and torch's TCPStore the same way.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <iostream>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "common/base/process_init.h"
#include "runtime/client/coordination_client_impl.h"

ABSL_FLAG(std::string, workload, "rendezvous", "rendezvous | kv");
ABSL_FLAG(std::string, address, "", "coordinator host:port");
ABSL_FLAG(std::string, token, "", "the job token");
ABSL_FLAG(int, first, 0, "first task id");
ABSL_FLAG(int, count, 1, "how many tasks (threads)");
ABSL_FLAG(int, world, 1, "tasks in the job");
ABSL_FLAG(int, barriers, 0, "barriers after the rendezvous");
ABSL_FLAG(double, seconds, 3, "kv: duration of the loop");
ABSL_FLAG(bool, wait_sets, false,
          "kv: wait for each set's answer (KvInsert) instead of sending it as TCPStore does "
          "(for profiling one full round trip per call)");

namespace phalanx::bench {
namespace {

constexpr absl::Duration kTimeout = absl::Seconds(120);

std::mutex print_mu;
void Say(const std::string& line) {
  std::lock_guard<std::mutex> lock(print_mu);
  std::string out = line + "\n";
  ssize_t unused = write(STDOUT_FILENO, out.data(), out.size());
  (void)unused;
}

double P50(std::vector<double> samples) {
  if (samples.empty()) return 0;
  std::nth_element(samples.begin(), samples.begin() + samples.size() / 2, samples.end());
  return samples[samples.size() / 2];
}

// A set that is not waited for, as TCPStore's set is not (like for like): later calls on the
// same session are handled after it; its failure is kept for the caller to check.
class UnwaitedSets {
 public:
  void Set(client::CoordinationClientImpl& client, const std::string& key,
           const std::string& value) {
    client.KvInsertAsync(key, value, true, [failed = failed_](absl::Status s) {
      if (!s.ok()) *failed = true;
    });
  }
  bool failed() const { return *failed_; }

 private:
  // Shared with the callbacks, which may run after this object is gone.
  std::shared_ptr<std::atomic<bool>> failed_ = std::make_shared<std::atomic<bool>>(false);
};

absl::Status Rendezvous(client::CoordinationClientImpl& client, int task, int barriers) {
  if (absl::Status s = client.Connect(kTimeout); !s.ok()) return s;
  UnwaitedSets sets;
  sets.Set(client, absl::StrCat("addr/", task), absl::StrCat("127.0.0.1:", 20000 + task));
  for (int b = -1; b < barriers; ++b) {
    if (absl::Status s = client.Barrier(absl::StrCat("b", b), kTimeout); !s.ok()) return s;
    if (sets.failed()) return absl::InternalError("publishing the address failed");
    Say(absl::StrCat("PASS task=", task, " barrier=", b,
                     " t_us=", absl::ToUnixMicros(absl::Now())));
  }
  return absl::OkStatus();
}

absl::Status Kv(client::CoordinationClientImpl& client, int task, double seconds) {
  const std::string value(100, 'v');
  UnwaitedSets unwaited;
  std::vector<double> sets, gets;
  using Clock = std::chrono::steady_clock;
  const auto end = Clock::now() + std::chrono::duration<double>(seconds);
  int64_t i = 0;
  while (Clock::now() < end) {
    const std::string key = absl::StrCat("kv/", task, "/", i % 1000);
    const auto t0 = Clock::now();
    if (absl::GetFlag(FLAGS_wait_sets)) {
      if (absl::Status s = client.KvInsert(key, value, true); !s.ok()) return s;
    } else {
      unwaited.Set(client, key, value);
    }
    const auto t1 = Clock::now();
    if (absl::StatusOr<std::string> got = client.KvGet(key, kTimeout); !got.ok()) {
      return got.status();
    }
    const auto t2 = Clock::now();
    if (unwaited.failed()) return absl::InternalError("a set failed");
    sets.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
    gets.push_back(std::chrono::duration<double, std::micro>(t2 - t1).count());
    ++i;
  }
  Say(absl::StrFormat("KV task=%d ops=%d set_p50_us=%.1f get_p50_us=%.1f", task, 2 * i,
                      P50(std::move(sets)), P50(std::move(gets))));
  return absl::OkStatus();
}

int Main() {
  const std::string workload = absl::GetFlag(FLAGS_workload);
  if (workload != "rendezvous" && workload != "kv") {
    std::cerr << "phalanx-peer-worker: --workload must be rendezvous or kv\n";
    return 2;
  }
  const int first = absl::GetFlag(FLAGS_first);
  std::vector<std::unique_ptr<client::CoordinationClientImpl>> clients;
  for (int task = first; task < first + absl::GetFlag(FLAGS_count); ++task) {
    client::ClientConfig config;
    config.coordinator = absl::GetFlag(FLAGS_address);
    config.job = "bench";
    config.task_id = task;
    config.num_tasks = absl::GetFlag(FLAGS_world);
    config.token = absl::GetFlag(FLAGS_token);
    auto created = client::CoordinationClientImpl::Create(config, {});
    if (!created.ok()) {
      std::cerr << "phalanx-peer-worker: " << created.status() << "\n";
      return 2;
    }
    if (workload == "kv") {
      if (absl::Status s = (*created)->Connect(kTimeout); !s.ok()) {
        Say(absl::StrCat("ERROR task=", task, " ", s.ToString()));
        return 1;
      }
    }
    clients.push_back(*std::move(created));
  }
  absl::Notification go;
  std::vector<std::thread> threads;
  for (size_t k = 0; k < clients.size(); ++k) {
    threads.emplace_back([&, k] {
      go.WaitForNotification();
      const int task = first + static_cast<int>(k);
      absl::Status s = workload == "kv"
                           ? Kv(*clients[k], task, absl::GetFlag(FLAGS_seconds))
                           : Rendezvous(*clients[k], task, absl::GetFlag(FLAGS_barriers));
      if (!s.ok()) Say(absl::StrCat("ERROR task=", task, " ", s.ToString()));
    });
  }
  Say("READY");
  std::string line;
  if (!std::getline(std::cin, line) || line != "GO") return 1;
  go.Notify();
  for (auto& t : threads) t.join();
  Say("DONE");
  while (std::getline(std::cin, line)) {
  }  // keep the connections open until the driver closes stdin
  return 0;
}

}  // namespace
}  // namespace phalanx::bench

int main(int argc, char** argv) {
  phalanx::base::InitProcess("peer-worker");
  absl::ParseCommandLine(argc, argv);
  return phalanx::bench::Main();
}
