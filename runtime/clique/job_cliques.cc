#include "runtime/clique/job_cliques.h"

#include <openssl/evp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "common/base/env_and_files.h"
#include "common/base/log.h"
#include "common/base/stream_endpoint.h"

namespace phalanx::clique {

JobCliques::Options JobCliques::OptionsFromEnv() {
  Options options;
  // TCP on the node's address (what the operator wires into task pods: docs/adr/0004) before a
  // mounted Unix socket.
  for (const char* name : {"PHALANX_CLIQUE_ADDRESS", "PHALANX_CLIQUE_SOCKET"}) {
    if (const char* value = std::getenv(name); value != nullptr && *value != '\0') {
      options.agent_socket = value;
      break;
    }
  }
  std::string token;
  if (const char* file = std::getenv("PHALANX_TOKEN_FILE"); file != nullptr && *file != '\0') {
    absl::StatusOr<std::string> read = base::ReadFileToString(file);
    if (read.ok()) {
      token = std::string(absl::StripAsciiWhitespace(*read));
    } else {
      PHX_LOG(WARNING) << "clique reports to the node agent without a key: " << read.status();
    }
  } else if (const char* value = std::getenv("PHALANX_TOKEN"); value != nullptr) {
    token = value;
  }
  options.agent_key = CliqueSocketKey(token);
  // The clique ticket the operator mounted for this task (common/auth/clique_ticket.h), which a
  // verifying agent requires; a Secret written before the agents had a key holds none.
  if (const char* file = std::getenv("PHALANX_CLIQUE_TICKET_FILE"); file != nullptr && *file) {
    absl::StatusOr<std::string> ticket = base::ReadFileToString(file);
    if (ticket.ok() && !absl::StripAsciiWhitespace(*ticket).empty()) {
      options.agent_key = std::string(absl::StripAsciiWhitespace(*ticket));
    }
  }
  return options;
}

std::string CliqueSocketKey(const std::string& token) {
  if (token.empty()) return "";
  // A fixed context, so the digest is of no use anywhere else a hash of the token might appear.
  const std::string input = absl::StrCat("phalanx clique socket key v1\n", token);
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int size = 0;
  if (EVP_Digest(input.data(), input.size(), digest, &size, EVP_sha256(), nullptr) != 1) {
    return "";  // cannot happen with a working libcrypto; the agent then refuses the reports
  }
  return absl::BytesToHexString(
      absl::string_view(reinterpret_cast<const char*>(digest), static_cast<size_t>(size)));
}

JobCliques::JobCliques(client::CoordinationClient& client, NcclApi& nccl, base::Clock& clock,
                       Options options)
    : client_(client), clock_(clock), options_(std::move(options)), exchange_(client) {
  CliqueManager::Options manager_options = options_.manager;
  CliqueManager::StateCallback user = manager_options.on_state_change;
  manager_options.on_state_change = [this, user](const CliqueInfo& clique, CliqueState from,
                                                 CliqueState to, const absl::Status& status) {
    OnState(clique, from, to, status);
    if (user) user(clique, from, to, status);
  };
  manager_ = std::make_unique<CliqueManager>(nccl, exchange_, clock_, manager_options);
  for (int t = 0; t < client_.num_tasks(); ++t) members_[t] = MemberStatus{t, 0, true};
  // Peers may have restarted before this process started: begin from the job's current state
  // (bounded; without it, peer events fill the table in as they come).
  absl::StatusOr<client::JobSnapshot> job = client_.WatchJobState(0, absl::Seconds(5));
  if (job.ok()) {
    for (const client::TaskInfo& t : job->tasks) {
      // Down only when failed: a task that has not registered yet is expected, not gone.
      members_[t.task_id] =
          MemberStatus{t.task_id, t.incarnation, t.state != client::TaskState::kFailed};
    }
  } else {
    PHX_LOG(WARNING) << "cliques start without the job's membership: " << job.status();
  }
  const client::TaskRef me = client_.task();
  members_[me.task_id] = MemberStatus{me.task_id, me.incarnation, true};
  runner_ = std::make_unique<base::PeriodicRunner>(clock_, options_.poll_period,
                                                   [this](absl::Time now) { manager_->Poll(now); });
  if (!options_.agent_socket.empty()) {
    // The agent forgets a report it has not heard again within its TTL (a task that died
    // without saying so): re-report every clique, on a thread of its own so a slow agent never
    // delays the manager's poll.
    refresher_ =
        std::make_unique<base::PeriodicRunner>(clock_, options_.agent_refresh, [this](absl::Time) {
          for (const CliqueInfo& clique : manager_->List()) Report(clique);
        });
  }
}

JobCliques::~JobCliques() {
  if (refresher_) refresher_->Stop();
  runner_->Stop();
}

absl::StatusOr<CliqueId> JobCliques::Acquire(const CliqueKey& key, int device_id,
                                             absl::Duration timeout, int cuda_device) {
  const client::TaskRef me = client_.task();
  std::optional<int> rank = key.RankOf(me.task_id, device_id);
  if (!rank.has_value()) {
    return absl::NotFoundError(absl::StrCat("task ", me.task_id, " device ", device_id,
                                            " is not in clique ", key.ToString()));
  }
  return manager_->Acquire(key, *rank, clock_.Now() + timeout, cuda_device);
}

void JobCliques::OnPeerChange(const client::TaskInfo& info) {
  std::vector<MemberStatus> members;
  {
    absl::MutexLock lock(&mu_);
    MemberStatus& m = members_[info.task_id];
    m.task_id = info.task_id;
    m.incarnation = info.incarnation;
    m.alive = info.state == client::TaskState::kConnected;
    for (const auto& [task, status] : members_) members.push_back(status);
  }
  manager_->OnMembershipChange(members);  // outside our lock: it runs callbacks
}

void JobCliques::OnState(const CliqueInfo& clique, CliqueState from, CliqueState to,
                         const absl::Status& status) {
  PHX_LOG(INFO) << "clique " << clique.key.ToString() << " rank " << clique.rank << ": "
                << CliqueStateName(from) << " -> " << CliqueStateName(to)
                << (status.ok() ? "" : absl::StrCat(" (", status.message(), ")"));
  if (!options_.agent_socket.empty()) Report(clique);
}

void JobCliques::Report(const CliqueInfo& clique) {
  absl::StatusOr<std::string> answer = ReportToAgent(options_.agent_socket, options_.agent_key,
                                                     clique.key.job(), client_.task(), clique);
  if (!answer.ok()) {
    PHX_LOG(WARNING) << "clique report to the node agent failed: " << answer.status();
  } else if (std::optional<std::string> reason = AbortRequestIn(*answer)) {
    // The request names this task (a GPU it uses failed), not one clique: its cliques are
    // aborted together, as the Python Manager aborts its process group. The trainer sees them
    // FAILED (Comm() says why) and leaves; the FAILED ones' own reports then change nothing.
    PHX_LOG(WARNING) << "the node agent asks to abort this task's cliques: " << *reason;
    const absl::Status why =
        absl::AbortedError(absl::StrCat("the node agent asked this task to abort: ", *reason));
    for (const CliqueInfo& c : manager_->List()) {
      if (absl::Status s = manager_->Abort(c.id, why); !s.ok() && !absl::IsNotFound(s)) {
        PHX_LOG(WARNING) << "aborting clique " << c.key.ToString() << ": " << s;
      }
    }
  }
}

std::optional<std::string> AbortRequestIn(const std::string& answer) {
  constexpr absl::string_view kAbort = "OK abort=";
  if (!absl::StartsWith(answer, kAbort)) return std::nullopt;
  return absl::StrReplaceAll(absl::string_view(answer).substr(kAbort.size()), {{"_", " "}});
}

absl::StatusOr<std::string> ReportToAgent(const std::string& path, const std::string& key,
                                          const std::string& job, const client::TaskRef& task,
                                          const CliqueInfo& clique) {
  std::vector<int> devices;
  if (const CliqueMember* m = clique.key.FindMember(task.task_id); m != nullptr) {
    devices = m->device_ids;
  }
  // The clique id names the key compactly (its KV prefix's fingerprint), spaces never appear.
  return ReportLineToAgent(path, key, job, task,
                           clique.key.KvPrefix().substr(clique.key.KvPrefix().rfind('/') + 1),
                           CliqueStateName(clique.state), devices);
}

absl::StatusOr<std::string> ReportLineToAgent(const std::string& path, const std::string& key,
                                              const std::string& job, const client::TaskRef& task,
                                              const std::string& clique, const std::string& state,
                                              const std::vector<int>& devices) {
  absl::StatusOr<base::StreamEndpoint> endpoint = base::ParseStreamEndpoint(path);
  if (!endpoint.ok()) return endpoint.status();
  absl::StatusOr<int> connected = base::ConnectStream(*endpoint, absl::Seconds(1));
  if (!connected.ok()) {
    return absl::UnavailableError(absl::StrCat("no node agent: ", connected.status().message()));
  }
  const int fd = *connected;
  const std::string line = absl::StrCat(
      "REPORT job=", job, " task=", task.task_id, " inc=", task.incarnation, " clique=", clique,
      " state=", state, " devices=", absl::StrJoin(devices, ","), " key=", key, "\n");
  std::string answer;
  if (send(fd, line.data(), line.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(line.size())) {
    char c;
    while (read(fd, &c, 1) == 1 && c != '\n') answer.push_back(c);
  }
  close(fd);
  if (answer.empty()) return absl::UnavailableError("the node agent did not answer");
  if (answer.rfind("ERR busy", 0) == 0) return absl::UnavailableError(answer);
  if (answer.rfind("ERR permission denied", 0) == 0) return absl::PermissionDeniedError(answer);
  if (answer.rfind("ERR", 0) == 0) return absl::InvalidArgumentError(answer);
  return answer;
}

}  // namespace phalanx::clique
