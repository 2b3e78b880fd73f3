// AgentEnv: what the agent learns about itself from its environment (the DaemonSet sets NODE_NAME,
// POD_NAME and POD_NAMESPACE from the downward API). Used by node_agent/main.cc. A value-type
// snapshot; the functions are thread-compatible.
//
// Every variable that is set but empty counts as unset. A manifest or a wrapper script can easily
// export `POD_NAME=` (an unset downward-API field, a `env: - name: POD_NAME` with no value), and an
// empty name is not harmless: GET .../namespaces/NS/pods/ with an empty name is a LIST, which the
// agent's RBAC (pods: get) denies and which would read every pod if it were allowed.
#pragma once

#include <optional>
#include <string>

#include "common/base/env_and_files.h"
#include "common/kube/client.h"

namespace phalanx::agent {

struct AgentEnv {
  std::optional<std::string> node_name;      // $NODE_NAME; nullopt when unset or empty
  std::optional<std::string> pod_name;       // $POD_NAME; never an empty string
  std::optional<std::string> pod_namespace;  // $POD_NAMESPACE; never an empty string

  // Both the agent's pod name and namespace are known.
  bool KnowsOwnPod() const { return pod_name.has_value() && pod_namespace.has_value(); }
};

// Reads the variables through `getenv` (base::ProcessGetenv in production).
AgentEnv ReadAgentEnv(const base::GetenvFn& getenv);

// True when the agent is being removed, not its node shut down, so its SIGTERM says nothing about
// the node: its own pod (env.pod_name in env.pod_namespace) has a deletionTimestamp (a rollout,
// `kubectl delete pod`), or cannot be read at all — gone (NotFound), or its ServiceAccount or
// RBAC already deleted (`helm uninstall` deletes those beside the DaemonSet, and the pods get
// SIGTERM after: seen on real nodes, where the old rule, "a failed read is a shutdown", left
// every node tainted phalanx.dev/preempting after an uninstall). A SIGTERM counts as a node
// shutdown only when the agent sees its own pod alive. False without a client or without a known
// pod (no API call is made then: an agent run as a process, e.g. by the demo).
bool AgentPodIsBeingDeleted(kube::Client* client, const AgentEnv& env);

}  // namespace phalanx::agent
