#include "runtime/clique/agent_watch.h"

#include <optional>

#include "common/base/log.h"
#include "runtime/clique/job_cliques.h"

namespace phalanx::clique {

AgentWatch::AgentWatch(Options options, base::Clock& clock,
                       std::function<void(const std::string&)> on_abort)
    : options_(std::move(options)), on_abort_(std::move(on_abort)) {
  // The first report goes at once: a GPU that fails in this task's first period must find the
  // task in the agent's table, or the agent has no one to ask to abort.
  runner_ = std::make_unique<base::PeriodicRunner>(
      clock, options_.period, [this](absl::Time) { Tick(); }, base::FirstTick::kAtOnce);
}

AgentWatch::~AgentWatch() { runner_->Stop(); }

absl::Status AgentWatch::last_status() {
  absl::MutexLock lock(&mu_);
  return last_status_;
}

void AgentWatch::Tick() {
  {
    absl::MutexLock lock(&mu_);
    if (aborted_) return;
  }
  absl::StatusOr<std::string> answer =
      ReportLineToAgent(options_.endpoint, options_.key, options_.job, options_.task,
                        options_.clique, "READY", options_.devices);
  std::string reason;
  {
    absl::MutexLock lock(&mu_);
    last_status_ = answer.status();
    if (answer.ok()) {
      if (std::optional<std::string> request = AbortRequestIn(*answer)) {
        aborted_ = true;
        reason = *std::move(request);
      }
    }
  }
  if (!reason.empty()) {
    PHX_LOG(WARNING) << "the node agent asks task " << options_.task.task_id
                     << " to abort: " << reason;
    on_abort_(reason);
  }
}

}  // namespace phalanx::clique
