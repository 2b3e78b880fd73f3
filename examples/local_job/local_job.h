// LocalJob: one coordination job run as real processes on this machine: the
// phalanx-coordinator binary and one phalanx-sample-worker per task, on 127.0.0.1. It can kill
// and restart workers (with a new incarnation) and the coordinator (on the same port), and
// reads the workers' EVENT lines. Used by multi-process tests, the demo and benchmarks.
// Thread-safe for reading events while the owner drives the job.
#pragma once

#include <csignal>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/base/incarnation.h"
#include "common/process/subprocess.h"
#include "examples/local_job/worker_event.h"
#include "runtime/client/coordination_client_impl.h"

namespace phalanx::harness {

struct LocalJobOptions {
  std::string bin_dir;   // the build directory (binaries are found under it)
  std::string work_dir;  // token, checkpoints and logs go here; created if missing
  std::string job = "local";
  int num_tasks = 4;
  absl::Duration heartbeat_interval = absl::Milliseconds(200);
  absl::Duration heartbeat_timeout = absl::Seconds(2);
  std::vector<std::string> worker_args;  // extra flags for every worker
  std::string token = "local-job-token";
  bool start_workers = true;
  bool echo = false;  // copy every process's stdout to our stderr
  // TLS as the operator sets it up (ADR 0006): a throwaway CA and a coordinator certificate for
  // kTlsServerName in work_dir; the coordinator serves TLS, workers get the CA and the name.
  bool tls = false;
};

// The name the coordinator's certificate carries under LocalJobOptions::tls.
inline constexpr char kLocalJobTlsServerName[] = "local-coordinator.phalanx.test";

class LocalJob {
 public:
  static absl::StatusOr<std::unique_ptr<LocalJob>> Start(LocalJobOptions options);
  ~LocalJob();

  int port() const { return port_; }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }
  const LocalJobOptions& options() const { return options_; }

  process::Subprocess& coordinator() { return *coordinator_; }
  process::Subprocess& worker(int task);
  base::Incarnation incarnation(int task);

  // Starts task `task` with the next incarnation (the old process must be gone or is killed).
  absl::Status StartWorker(int task, std::map<std::string, std::string> extra_env = {});
  // Sends `signal` to the coordinator and waits for it to exit (SIGTERM: a graceful stop, as
  // a pod eviction does; SIGKILL: a crash). The workers keep running and retry.
  absl::Status StopCoordinator(int signal);
  // Starts a new coordinator on the same port (after StopCoordinator): a fresh one, which
  // knows nothing of the old one's state.
  absl::Status StartNewCoordinator() { return StartCoordinator(port_); }
  // StopCoordinator(signal), then StartNewCoordinator().
  absl::Status RestartCoordinator(int signal = SIGKILL);

  // Every event of `task` across its incarnations, in order.
  std::vector<WorkerEvent> Events(int task);
  // Waits for the first event of `task` (any incarnation) with `kind` that `match` accepts.
  std::optional<WorkerEvent> WaitForEvent(
      int task, const std::string& kind, absl::Duration timeout,
      const std::function<bool(const WorkerEvent&)>& match = nullptr);
  // Waits until every task's current process exits; true if all exited 0.
  bool WaitAllExited(absl::Duration timeout);

  // For a failed wait's message: each task's last `lines` stdout lines (its EVENT lines, every
  // incarnation) and the tail of its stderr log, then the coordinator log's tail. The events
  // live only in memory, so without this a hung task leaves nothing to read.
  std::string Describe(int lines = 12);

  // A client speaking for task 0 that never registers: for operator-style calls
  // (NotifyPreemption, WatchJobState).
  std::unique_ptr<client::CoordinationClientImpl> AdminClient();
  // What a client needs to reach the coordinator (its CA and name with TLS; nothing without).
  client::CoordinatorTls ClientTls() const;

 private:
  explicit LocalJob(LocalJobOptions options) : options_(std::move(options)) {}
  absl::Status StartCoordinator(int port);

  LocalJobOptions options_;
  int port_ = 0;
  std::unique_ptr<process::Subprocess> coordinator_;
  std::vector<std::unique_ptr<process::Subprocess>> old_coordinators_;
  absl::Mutex mu_;
  // Per task, every process it had (the last is the current one).
  std::vector<std::vector<std::unique_ptr<process::Subprocess>>> workers_ ABSL_GUARDED_BY(mu_);
};

}  // namespace phalanx::harness
