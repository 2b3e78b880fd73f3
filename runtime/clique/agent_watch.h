// AgentWatch: keeps one clique reported to the node agent (state READY, every `period`) and calls
// `on_abort(reason)` once, on its own thread, when the agent asks this task to abort (the
// request rides on the answer to a report: `period` bounds how late it is seen). For a process
// whose communicators are not a CliqueManager's (the sample worker; JobCliques reports its own,
// the Python torch Manager has phalanx.cliques.AgentWatch). A missing agent is retried quietly.
// The agent drops a report not refreshed within its TTL, so nothing needs undoing at the end.
// Thread-safe; the destructor stops it (not from inside on_abort).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/base/clock.h"
#include "common/base/periodic_runner.h"
#include "runtime/client/coordination_client.h"

namespace phalanx::clique {

class AgentWatch {
 public:
  struct Options {
    std::string
        endpoint;     // the agent: host:port or a Unix socket path (JobCliques::OptionsFromEnv)
    std::string key;  // CliqueSocketKey(token)
    std::string job;
    client::TaskRef task;
    std::string clique;        // a word naming what is reported
    std::vector<int> devices;  // the node's GPU indices it uses
    absl::Duration period = absl::Milliseconds(250);
  };
  AgentWatch(Options options, base::Clock& clock, std::function<void(const std::string&)> on_abort);
  ~AgentWatch();

  // The last report's error, OK once a report was answered (for logs and tests).
  absl::Status last_status();

 private:
  void Tick();

  const Options options_;
  const std::function<void(const std::string&)> on_abort_;
  absl::Mutex mu_;
  absl::Status last_status_ ABSL_GUARDED_BY(mu_) = absl::UnavailableError("not reported yet");
  bool aborted_ ABSL_GUARDED_BY(mu_) = false;
  std::unique_ptr<base::PeriodicRunner> runner_;  // last: its thread uses the members above
};

}  // namespace phalanx::clique
