#include "node_agent/cliques/clique_registry.h"

#include <signal.h>

#include <algorithm>
#include <cerrno>

#include "absl/strings/str_cat.h"
#include "common/auth/clique_ticket.h"

namespace phalanx::agent {
namespace {

bool KnownState(const std::string& s) {
  static const char* kStates[] = {"FORMING",   "READY",     "ABORTING", "WAITING",
                                  "SHRINKING", "REFORMING", "FAILED"};
  return std::any_of(std::begin(kStates), std::end(kStates), [&](const char* k) { return s == k; });
}

// EPERM means the process exists but belongs to someone else: still alive.
bool ProcessAlive(int pid) { return kill(pid, 0) == 0 || errno == EPERM; }

// Compares every byte whatever the first difference, so a caller cannot learn a key's prefix
// from the answer's timing.
bool SameKey(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

}  // namespace

CliqueRegistry::CliqueRegistry(CliqueRegistryOptions options)
    : options_([&] {
        if (!options.process_alive) options.process_alive = ProcessAlive;
        return std::move(options);
      }()) {}

absl::StatusOr<std::string> CliqueRegistry::ClaimantJob(const std::string& job, int task,
                                                        const std::string& key) const {
  if (!options_.ticket_key) return job;
  absl::StatusOr<std::string> agent_key = options_.ticket_key();
  if (!agent_key.ok() || agent_key->empty()) {
    return absl::PermissionDeniedError(
        absl::StrCat("this agent cannot check clique tickets yet (",
                     agent_key.ok() ? "its key is empty" : agent_key.status().message(), ")"));
  }
  absl::StatusOr<auth::CliqueTicketClaims> claims = auth::VerifyCliqueTicket(*agent_key, key);
  if (!claims.ok()) return claims.status();
  std::string identity = absl::StrCat(claims->ns, "/", claims->name, "/", claims->uid);
  if ((claims->name != job && identity != job) || claims->task != task) {
    return absl::PermissionDeniedError(absl::StrCat("the ticket is task ", claims->task, " of job ",
                                                    claims->ns, "/", claims->name, "'s, not task ",
                                                    task, " of job ", job));
  }
  return identity;
}

absl::Status CliqueRegistry::ClaimLocked(const TaskKey& task, const CliqueCaller& caller,
                                         absl::Time now) {
  if (caller.key.empty()) {
    return absl::PermissionDeniedError(options_.ticket_key
                                           ? "a key is required (key=<the task's clique ticket>)"
                                           : "a key is required (key=<digest of PHALANX_TOKEN>)");
  }
  auto it = claims_.find(task);
  if (it != claims_.end() && !SameKey(it->second.key, caller.key)) {
    const Claim& held = it->second;
    const bool expired = held.refreshed + options_.ttl <= now;
    const bool holder_gone = held.pid > 0 && !options_.process_alive(held.pid);
    if (!expired && !holder_gone) {
      return absl::PermissionDeniedError(absl::StrCat("job ", task.first, " task ", task.second,
                                                      " is held by another credential"));
    }
    DropTaskLocked(task);  // the old holder's entries are not the new holder's
    it = claims_.end();
  }
  Claim& claim = claims_[task];
  claim.key = caller.key;
  if (caller.pid > 0) claim.pid = caller.pid;
  claim.refreshed = now;
  return absl::OkStatus();
}

void CliqueRegistry::DropTaskLocked(const TaskKey& task) {
  for (auto it = cliques_.begin(); it != cliques_.end();) {
    const bool match = it->second.job == task.first && it->second.task == task.second;
    it = match ? cliques_.erase(it) : std::next(it);
  }
  claims_.erase(task);
  abort_requests_.erase(task);
}

absl::Status CliqueRegistry::Report(LocalClique clique, const CliqueCaller& caller,
                                    std::string* abort) {
  if (clique.job.empty() || clique.clique.empty()) {
    return absl::InvalidArgumentError("a clique report needs job and clique");
  }
  if (clique.task < 0) return absl::InvalidArgumentError("task must be >= 0");
  if (!KnownState(clique.state)) {
    return absl::InvalidArgumentError(absl::StrCat("unknown clique state '", clique.state, "'"));
  }
  // Outside the lock: it may read the key's file.
  absl::StatusOr<std::string> job = ClaimantJob(clique.job, clique.task, caller.key);
  if (!job.ok()) return job.status();
  clique.job = *std::move(job);
  absl::MutexLock lock(&mu_);
  if (absl::Status s = ClaimLocked({clique.job, clique.task}, caller, clique.updated); !s.ok()) {
    return s;
  }
  for (auto it = cliques_.begin(); it != cliques_.end();) {
    const LocalClique& c = it->second;
    const bool older =
        c.job == clique.job && c.task == clique.task && c.incarnation < clique.incarnation;
    it = older ? cliques_.erase(it) : std::next(it);
  }
  if (abort != nullptr) {
    auto pending = abort_requests_.find({clique.job, clique.task});
    if (pending != abort_requests_.end()) {
      *abort = std::move(pending->second);
      abort_requests_.erase(pending);
    }
  }
  Key key{clique.job, clique.task, clique.clique};
  cliques_[key] = std::move(clique);
  return absl::OkStatus();
}

absl::Status CliqueRegistry::Forget(const std::string& job, int task, const CliqueCaller& caller,
                                    absl::Time now) {
  absl::StatusOr<std::string> claimant = ClaimantJob(job, task, caller.key);
  if (!claimant.ok()) return claimant.status();
  const TaskKey key{*claimant, task};
  absl::MutexLock lock(&mu_);
  if (claims_.find(key) == claims_.end()) return absl::OkStatus();
  if (absl::Status s = ClaimLocked(key, caller, now); !s.ok()) return s;
  DropTaskLocked(key);
  return absl::OkStatus();
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

int CliqueRegistry::Expire(absl::Time now) {
  absl::MutexLock lock(&mu_);
  int dropped = 0;
  for (auto it = cliques_.begin(); it != cliques_.end();) {
    const bool stale = it->second.updated + options_.ttl <= now;
    if (stale) ++dropped;
    it = stale ? cliques_.erase(it) : std::next(it);
  }
  for (auto it = claims_.begin(); it != claims_.end();) {
    if (it->second.refreshed + options_.ttl > now) {
      ++it;
      continue;
    }
    abort_requests_.erase(it->first);
    it = claims_.erase(it);
  }
  return dropped;
}

std::vector<LocalClique> CliqueRegistry::List() const {
  absl::MutexLock lock(&mu_);
  std::vector<LocalClique> out;
  for (const auto& [key, c] : cliques_) out.push_back(c);
  return out;
}

std::vector<LocalClique> CliqueRegistry::ListFor(const std::string& key) const {
  absl::MutexLock lock(&mu_);
  std::vector<LocalClique> out;
  if (key.empty()) return out;
  for (const auto& [k, c] : cliques_) {
    auto claim = claims_.find({c.job, c.task});
    if (claim != claims_.end() && SameKey(claim->second.key, key)) out.push_back(c);
  }
  return out;
}

std::map<std::string, int> CliqueRegistry::CountByState() const {
  absl::MutexLock lock(&mu_);
  std::map<std::string, int> counts;
  for (const auto& [key, c] : cliques_) ++counts[c.state];
  return counts;
}

}  // namespace phalanx::agent
