#include "bench/task_host.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "bench/measure_util.h"
#include "bench/write_line.h"
#include "runtime/client/coordination_client_impl.h"

namespace phalanx::bench {
int RunTaskHost(const TaskHostOptions& options) {
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGTERM);
  sigaddset(&stop, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);

  absl::Notification release;
  std::vector<std::thread> threads;
  for (int task = options.first; task < options.first + options.count; ++task) {
    threads.emplace_back([&, task] {
      client::ClientConfig config;
      config.coordinator = options.address;
      config.job = "bench";
      config.task_id = task;
      config.num_tasks = options.num_tasks;
      config.token = options.token;
      config.incarnation = options.incarnation;
      config.tls = options.tls;
      client::ClientCallbacks callbacks;
      callbacks.on_peer_change = [task](const client::TaskInfo& info) {
        if (info.state == client::TaskState::kFailed) {
          WriteLine(
              absl::StrCat("TOLD task=", task, " peer=", info.task_id, " t_us=", NowMicros()));
        }
      };
      auto created = client::CoordinationClientImpl::Create(config, callbacks);
      if (!created.ok()) {
        WriteLine(absl::StrCat("ERROR task=", task, " ", created.status().ToString()));
        return;
      }
      auto& client = **created;
      if (absl::Status s = client.Connect(absl::Seconds(120)); !s.ok()) {
        WriteLine(absl::StrCat("ERROR task=", task, " ", s.ToString()));
        return;
      }
      WriteLine(absl::StrCat("CONNECTED task=", task, " t_us=", NowMicros()));
      // The PASS lines are written after the last barrier, in one write: the harness's own
      // writes (and the driver's reads) stay out of the rounds it times. They carry their time.
      std::string passes;
      for (int b = -1; b < options.barriers; ++b) {
        absl::Status s = client.Barrier(absl::StrCat("b", b), absl::Seconds(120));
        if (!s.ok()) {
          WriteLine(absl::StrCat(passes, "ERROR task=", task, " ", s.ToString()));
          return;
        }
        absl::StrAppend(&passes, "PASS task=", task, " barrier=", b, " t_us=", NowMicros(), "\n");
      }
      passes.pop_back();  // WriteLine adds the last newline
      WriteLine(passes);
      release.WaitForNotification();  // keep the session alive until the driver is done
    });
  }
  int sig = 0;
  sigwait(&stop, &sig);
  release.Notify();
  for (auto& t : threads) t.join();
  return 0;
}

}  // namespace phalanx::bench
