// CoordinatorLink: the operator's channel to each running job's coordinator (DESIGN.md "How the
// parts talk"). Per job, one WatchJobState long poll learns which tasks the coordinator declared
// failed — a crash, a hang caught by heartbeats, a reported error — so the reconciler restarts
// them even while their pods still look Running; and preemption notices open a coordinated
// checkpoint round on the coordinator. Wake(key) is called (never under a lock) when a job's
// failed set changes. Thread-safe. One thread per watched job.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace phalanx::op {

class CoordinatorLink {
 public:
  using Wake = std::function<void(const std::string& job_key)>;
  explicit CoordinatorLink(Wake wake);
  ~CoordinatorLink();  // Forget()s every job
  CoordinatorLink(const CoordinatorLink&) = delete;
  CoordinatorLink& operator=(const CoordinatorLink&) = delete;

  // Watches `key`'s coordinator at `address` with `token`; restarts the watch when either changes.
  // `coordinator` names the coordinator pod (its UID): a recreated coordinator gets a fresh
  // channel at once instead of waiting out the old one's reconnect back-off.
  void Ensure(const std::string& key, const std::string& address, const std::string& token,
              const std::string& coordinator);
  // Stops watching `key` (bounded: the long poll is cancelled).
  void Forget(const std::string& key);
  struct FailedTask {
    int incarnation = 0;
    std::string reason;  // the coordinator's words: "heartbeat timeout", "session broken: ..."
    friend bool operator==(const FailedTask&, const FailedTask&) = default;
  };
  // task index → the incarnation the coordinator declared failed, and why (one snapshot).
  std::map<int, FailedTask> FailedTasks(const std::string& key);
  // Opens (or joins) a preemption round for `tasks` that must checkpoint before `deadline`.
  absl::Status NotifyPreemption(const std::string& key, const std::vector<int>& tasks,
                                absl::Time deadline, const std::string& reason);

 private:
  struct Watcher;
  std::shared_ptr<Watcher> WatcherFor(const std::string& key);
  void Loop(std::shared_ptr<Watcher> watcher, std::string key);

  const Wake wake_;
  absl::Mutex mu_;
  std::map<std::string, std::shared_ptr<Watcher>> watchers_ ABSL_GUARDED_BY(mu_);
};

}  // namespace phalanx::op
