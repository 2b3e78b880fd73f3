#include "node_agent/agent_env.h"

#include "common/kube/object_meta.h"

namespace phalanx::agent {
namespace {

// The variable's value; nullopt when unset or empty (both mean "not configured").
std::optional<std::string> NonEmpty(const base::GetenvFn& getenv, const std::string& name) {
  std::optional<std::string> value = getenv(name);
  if (value.has_value() && value->empty()) return std::nullopt;
  return value;
}

}  // namespace

AgentEnv ReadAgentEnv(const base::GetenvFn& getenv) {
  AgentEnv env;
  env.node_name = NonEmpty(getenv, "NODE_NAME");
  env.pod_name = NonEmpty(getenv, "POD_NAME");
  env.pod_namespace = NonEmpty(getenv, "POD_NAMESPACE");
  return env;
}

bool AgentPodIsBeingDeleted(kube::Client* client, const AgentEnv& env) {
  if (client == nullptr || !env.KnowsOwnPod()) return false;
  absl::StatusOr<kube::Json> pod =
      client->Get({"", "v1", "pods", true}, *env.pod_namespace, *env.pod_name);
  return !pod.ok() || !kube::MetaString(*pod, "deletionTimestamp").empty();
}

}  // namespace phalanx::agent
