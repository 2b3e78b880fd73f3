// CliqueRegistry: the node's table of GPU cliques, as the training processes on it report them
// over the agent's Unix socket (clique_socket.h): which local GPUs each task's cliques use and
// their state, plus abort requests the agent raises for a task (a fatal error on one of its
// GPUs) that the task picks up on its next report. Feeds the agent's metrics. Thread-safe.
#pragma once

#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace phalanx::agent {

struct LocalClique {
  std::string job;
  int task = 0;
  uint64_t incarnation = 0;
  std::string clique;        // the client's clique id (its key's short form)
  std::string state;         // FORMING, READY, ABORTING, WAITING, SHRINKING, REFORMING, FAILED
  std::vector<int> devices;  // local GPU indexes
  absl::Time updated;
};

class CliqueRegistry {
 public:
  // Records (or replaces) one clique of one task. A report from a newer incarnation of the
  // task drops every clique of the older one. InvalidArgument: empty job/clique, bad state.
  absl::Status Report(LocalClique clique);
  // The task's process is gone: forget its cliques.
  void Forget(const std::string& job, int task);
  // Asks every task using local GPU `device` to abort its cliques; returns how many tasks.
  int RequestAbortForDevice(int device, const std::string& reason);
  // The abort reason pending for the task (cleared by this call), "" if none.
  std::string TakeAbortRequest(const std::string& job, int task);

  std::vector<LocalClique> List() const;
  std::map<std::string, int> CountByState() const;

 private:
  using Key = std::tuple<std::string, int, std::string>;  // job, task, clique
  mutable absl::Mutex mu_;
  std::map<Key, LocalClique> cliques_ ABSL_GUARDED_BY(mu_);
  std::map<std::pair<std::string, int>, std::string> abort_requests_ ABSL_GUARDED_BY(mu_);
};

}  // namespace phalanx::agent
