// JobCliques: GPU cliques for a training process, on top of its coordination client. It owns a
// CliqueManager whose unique ids go through the job's key-value store, ticks it (a runner
// thread, every `poll_period`), and turns the client's peer events into the membership the
// manager needs: a peer that failed is down (its cliques wait), a peer that registered a new
// incarnation restarted (its cliques are aborted and re-formed). Optionally it reports every
// clique's state to the node agent (PHALANX_CLIQUE_ADDRESS or PHALANX_CLIQUE_SOCKET), so the
// agent's metrics show them and a failed GPU's abort request reaches this process (and is
// obeyed: every clique of this task is aborted and FAILED with the agent's reason): on every
// state change, and again every `agent_refresh` (the agent drops reports not refreshed within its
// TTL, 30 s by default). Reports carry `agent_key`: this task's clique ticket where the operator
// mounted one (common/auth/clique_ticket.h; the agent verifies it), else a digest of its
// credential (CliqueSocketKey). The agent lets only that key read or change this task's
// entries, and never sees the credential.
//
// Wiring: create it after the client, call OnPeerChange from ClientCallbacks::on_peer_change
// (cheap: no RPC, no wait), then Acquire a key per communicator. Teardown: stop forwarding
// on_peer_change to it (under a lock the forwarding callback holds) before destroying it, then
// destroy the client: the client's session thread delivers events until the client is gone,
// and this object uses the client until it is gone (job_cliques_test.cc's Task does this).
// Thread-safe.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "common/base/clock.h"
#include "common/base/periodic_runner.h"
#include "runtime/client/coordination_client.h"
#include "runtime/clique/clique_manager.h"
#include "runtime/clique/coordination_unique_id_exchange.h"

namespace phalanx::clique {

class JobCliques {
 public:
  struct Options {
    absl::Duration poll_period = absl::Milliseconds(5);
    CliqueManager::Options manager;
    std::string agent_socket;  // the agent's socket path or host:port; "" = no reports
    std::string agent_key;     // the clique ticket, or CliqueSocketKey(token); see FromEnv
    absl::Duration agent_refresh = absl::Seconds(10);
  };
  // Options with agent_socket from $PHALANX_CLIQUE_ADDRESS (host:port, the node agent on the
  // node's address) or else $PHALANX_CLIQUE_SOCKET (a mounted Unix socket), agent_key the
  // ticket in $PHALANX_CLIQUE_TICKET_FILE when it holds one, else the digest of the token in
  // $PHALANX_TOKEN_FILE (a file) or $PHALANX_TOKEN.
  static Options OptionsFromEnv();

  JobCliques(client::CoordinationClient& client, NcclApi& nccl, base::Clock& clock,
             Options options);
  ~JobCliques();  // stops the runner before the manager goes

  // The clique `key` as this task's rank for `device_id`, formed within `timeout` on CUDA device
  // `cuda_device` (the physical device behind `device_id`; the runner thread has no current
  // device of its own). Errors: those of CliqueManager::Acquire; NotFound if (this task,
  // device) is not in `key`.
  absl::StatusOr<CliqueId> Acquire(const CliqueKey& key, int device_id, absl::Duration timeout,
                                   int cuda_device);
  // Feed every ClientCallbacks::on_peer_change event here.
  void OnPeerChange(const client::TaskInfo& info);

  CliqueManager& manager() { return *manager_; }

 private:
  void OnState(const CliqueInfo& clique, CliqueState from, CliqueState to,
               const absl::Status& status);
  void Report(const CliqueInfo& clique);

  client::CoordinationClient& client_;
  base::Clock& clock_;
  const Options options_;
  CoordinationUniqueIdExchange exchange_;
  std::unique_ptr<CliqueManager> manager_;
  absl::Mutex mu_;
  std::map<int, MemberStatus> members_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<base::PeriodicRunner> runner_;
  std::unique_ptr<base::PeriodicRunner> refresher_;  // null without an agent socket
};

// The key this task shows the node agent's clique socket: hex SHA-256 of a fixed context and
// `token` (its coordination credential), so the agent can tell holders of different credentials
// apart without learning one it could use against the coordinator. "" for an empty token.
std::string CliqueSocketKey(const std::string& token);

// Sends one REPORT line for `clique` with `key` to the agent's socket at `path` (bounded: 1 s);
// the agent's answer, e.g. "OK" or "OK abort=<reason>". Unavailable when there is no agent (or
// it is busy), InvalidArgument or PermissionDenied with the agent's ERR line.
absl::StatusOr<std::string> ReportToAgent(const std::string& path, const std::string& key,
                                          const std::string& job, const client::TaskRef& task,
                                          const CliqueInfo& clique);
// The same for any clique id, state and devices: for a process whose communicators are not
// cliques of a CliqueManager (AgentWatch). `clique` and `state` must be words (no spaces).
absl::StatusOr<std::string> ReportLineToAgent(const std::string& path, const std::string& key,
                                              const std::string& job, const client::TaskRef& task,
                                              const std::string& clique, const std::string& state,
                                              const std::vector<int>& devices);
// The agent's abort request in its answer to a report ("OK abort=<reason>", the reason written
// with '_' for spaces to stay one word on its line), spaces restored; nullopt for any other
// answer.
std::optional<std::string> AbortRequestIn(const std::string& answer);

}  // namespace phalanx::clique
