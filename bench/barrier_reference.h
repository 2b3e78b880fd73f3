// The reference barrier: the traffic shape of a Phalanx barrier round with no coordination
// service behind it, run in the same bench run so a reader can tell the machine's speed at the
// time from the service's own cost (this 2-core machine's speed varies by 1.5x from hour to
// hour, see docs/benchmarks.md).
//
// Same layout as the Phalanx barrier: task threads in host processes, one loopback TCP
// connection per process, one reader thread per process. A task's arrival is one byte sent on
// its process's connection; when every task's byte is in, the server answers each connection
// with one byte per task in one send; the process's reader wakes each task thread with a futex.
// What it leaves out is exactly what Phalanx adds: framing, protobuf, credentials, call ids,
// timeouts and subsets, the coordinator's state and metrics.
//
// Host output is the task host's (task_host.h): PASS task=<id> barrier=<n> t_us=<unix micros>.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"

namespace phalanx::bench {

// The barrier server: a thread that releases a round once `num_tasks` bytes have arrived.
class ReferenceBarrierServer {
 public:
  // Listens on 127.0.0.1 (an ephemeral port) and starts serving.
  static absl::StatusOr<std::unique_ptr<ReferenceBarrierServer>> Start(int num_tasks);
  ~ReferenceBarrierServer();  // stops the thread, closes every connection
  ReferenceBarrierServer(const ReferenceBarrierServer&) = delete;
  ReferenceBarrierServer& operator=(const ReferenceBarrierServer&) = delete;

  std::string address() const;

 private:
  ReferenceBarrierServer(int num_tasks, int listen_fd, int stop_fd, int port);
  void Serve();

  const int num_tasks_;
  const int listen_fd_;
  const int stop_fd_;  // eventfd: written to stop Serve
  const int port_;
  std::thread thread_;
};

struct ReferenceHostOptions {
  std::string address;
  int first = 0;
  int count = 1;
  int barriers = 0;
};

// A host process's body (--role=reference): `count` task threads pass barriers -1..barriers-1
// through the server at `address`, then print their PASS lines and exit. 0 on success.
int RunReferenceHost(const ReferenceHostOptions& options);

}  // namespace phalanx::bench
