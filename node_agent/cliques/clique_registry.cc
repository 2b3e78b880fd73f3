#include "node_agent/cliques/clique_registry.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace phalanx::agent {
namespace {

bool KnownState(const std::string& s) {
  static const char* kStates[] = {"FORMING",   "READY",     "ABORTING", "WAITING",
                                  "SHRINKING", "REFORMING", "FAILED"};
  return std::any_of(std::begin(kStates), std::end(kStates), [&](const char* k) { return s == k; });
}

}  // namespace

absl::Status CliqueRegistry::Report(LocalClique clique) {
  if (clique.job.empty() || clique.clique.empty()) {
    return absl::InvalidArgumentError("a clique report needs job and clique");
  }
  if (clique.task < 0) return absl::InvalidArgumentError("task must be >= 0");
  if (!KnownState(clique.state)) {
    return absl::InvalidArgumentError(absl::StrCat("unknown clique state '", clique.state, "'"));
  }
  absl::MutexLock lock(&mu_);
  for (auto it = cliques_.begin(); it != cliques_.end();) {
    const LocalClique& c = it->second;
    const bool older =
        c.job == clique.job && c.task == clique.task && c.incarnation < clique.incarnation;
    it = older ? cliques_.erase(it) : std::next(it);
  }
  Key key{clique.job, clique.task, clique.clique};
  cliques_[key] = std::move(clique);
  return absl::OkStatus();
}

void CliqueRegistry::Forget(const std::string& job, int task) {
  absl::MutexLock lock(&mu_);
  for (auto it = cliques_.begin(); it != cliques_.end();) {
    it = (it->second.job == job && it->second.task == task) ? cliques_.erase(it) : std::next(it);
  }
  abort_requests_.erase({job, task});
}

int CliqueRegistry::RequestAbortForDevice(int device, const std::string& reason) {
  absl::MutexLock lock(&mu_);
  int tasks = 0;
  for (const auto& [key, c] : cliques_) {
    if (std::find(c.devices.begin(), c.devices.end(), device) == c.devices.end()) continue;
    auto [it, fresh] = abort_requests_.try_emplace({c.job, c.task}, reason);
    if (fresh) ++tasks;
  }
  return tasks;
}

std::string CliqueRegistry::TakeAbortRequest(const std::string& job, int task) {
  absl::MutexLock lock(&mu_);
  auto it = abort_requests_.find({job, task});
  if (it == abort_requests_.end()) return "";
  std::string reason = std::move(it->second);
  abort_requests_.erase(it);
  return reason;
}

std::vector<LocalClique> CliqueRegistry::List() const {
  absl::MutexLock lock(&mu_);
  std::vector<LocalClique> out;
  for (const auto& [key, c] : cliques_) out.push_back(c);
  return out;
}

std::map<std::string, int> CliqueRegistry::CountByState() const {
  absl::MutexLock lock(&mu_);
  std::map<std::string, int> counts;
  for (const auto& [key, c] : cliques_) ++counts[c.state];
  return counts;
}

}  // namespace phalanx::agent
