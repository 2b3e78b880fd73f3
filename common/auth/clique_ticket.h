// Clique tickets: how a task proves to its node agent which (job, task) it is, on the agent's
// clique channel (node_agent/cliques/clique_socket.h), without the agent holding any job's Secret.
//
//   agent key   HMAC-SHA256(operator key, "phalanx/agent-clique/v1"): the operator writes it into
//               one Secret in its own namespace that the agent DaemonSet mounts (nothing else of
//               the operator's reaches a node)
//   ticket      "clique/v1/<ns>/<name>/<uid>/<task>/" + HMAC-SHA256(agent key, the part before):
//               written by the operator into the job's Secret beside task <task>'s credential and
//               mounted only into that task's pod
//
// The agent recomputes the HMAC, so it accepts exactly the tickets the operator issued: a pod of
// another job holds its own tickets only, which name its own job, and cannot make one for this
// job's tasks. The uid makes a re-created job of the same name get new tickets.
// Thread-safety: pure functions.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace phalanx::auth {

// The key the agents verify tickets with, derived from the operator's key.
std::string AgentCliqueKey(absl::string_view operator_key);

// The ticket of task `task` of job ns/name (uid).
std::string CliqueTicket(absl::string_view agent_key, absl::string_view ns, absl::string_view name,
                         absl::string_view uid, int task);

// What a valid ticket says.
struct CliqueTicketClaims {
  std::string ns;
  std::string name;
  std::string uid;
  int task = 0;
};

// The ticket's claims if `agent_key` made it; PermissionDenied otherwise (malformed, or another
// key's: the message never includes the ticket). Constant-time in the HMAC comparison.
absl::StatusOr<CliqueTicketClaims> VerifyCliqueTicket(absl::string_view agent_key,
                                                      absl::string_view ticket);

}  // namespace phalanx::auth
