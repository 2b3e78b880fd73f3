// ReadAgentEnv / AgentPodIsBeingDeleted: a set-but-empty variable is unset, and the agent never
// GETs its pod with an empty name (a LIST, denied by its RBAC) or namespace (issue 11 item 10).
#include "node_agent/agent_env.h"

#include <gtest/gtest.h>

#include <map>
#include <vector>

namespace phalanx::agent {
namespace {

base::GetenvFn EnvOf(std::map<std::string, std::string> vars) {
  return [vars = std::move(vars)](const std::string& name) -> std::optional<std::string> {
    auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

// Records each Get (namespace/name) and answers it with `pod`; every other call is a test bug.
class GetRecorder final : public kube::Client {
 public:
  absl::StatusOr<kube::Json> Get(const kube::Resource& r, const std::string& ns,
                                 const std::string& name) override {
    gets.push_back(ns + "/" + name);
    if (!get_error.ok()) return get_error;
    return pod;
  }
  absl::StatusOr<kube::ObjectList> List(const kube::Resource&, const std::string&,
                                        const kube::ListOptions&) override {
    return Unexpected();
  }
  absl::StatusOr<kube::Json> Create(const kube::Resource&, const std::string&,
                                    const kube::Json&) override {
    return Unexpected();
  }
  absl::StatusOr<kube::Json> Update(const kube::Resource&, const std::string&,
                                    const kube::Json&) override {
    return Unexpected();
  }
  absl::StatusOr<kube::Json> UpdateStatus(const kube::Resource&, const std::string&,
                                          const kube::Json&) override {
    return Unexpected();
  }
  absl::StatusOr<kube::Json> Patch(const kube::Resource&, const std::string&, const std::string&,
                                   kube::PatchType, const kube::Json&,
                                   const kube::PatchOptions&) override {
    return Unexpected();
  }
  absl::Status Delete(const kube::Resource&, const std::string&, const std::string&,
                      const kube::DeleteOptions&) override {
    return Unexpected();
  }
  absl::StatusOr<std::unique_ptr<kube::WatchStream>> Watch(const kube::Resource&,
                                                           const std::string&,
                                                           const kube::WatchOptions&) override {
    return Unexpected();
  }

  std::vector<std::string> gets;
  absl::Status get_error;  // answered instead of `pod` when set
  kube::Json pod = kube::Json::parse(
      R"({"metadata":{"name":"agent-x","deletionTimestamp":"2024-01-01T00:00:00Z"}})");

 private:
  absl::Status Unexpected() {
    ADD_FAILURE() << "AgentPodIsBeingDeleted made a call other than Get";
    return absl::UnimplementedError("unexpected");
  }
};

TEST(AgentEnv, EmptyVariables_AreUnset) {
  const AgentEnv env =
      ReadAgentEnv(EnvOf({{"NODE_NAME", ""}, {"POD_NAME", ""}, {"POD_NAMESPACE", ""}}));
  EXPECT_EQ(env.node_name, std::nullopt);
  EXPECT_EQ(env.pod_name, std::nullopt);
  EXPECT_EQ(env.pod_namespace, std::nullopt);
  EXPECT_FALSE(env.KnowsOwnPod());
}

TEST(AgentEnv, SetVariables_AreRead) {
  const AgentEnv env = ReadAgentEnv(
      EnvOf({{"NODE_NAME", "n1"}, {"POD_NAME", "agent-x"}, {"POD_NAMESPACE", "phalanx-system"}}));
  EXPECT_EQ(env.node_name, "n1");
  EXPECT_EQ(env.pod_name, "agent-x");
  EXPECT_EQ(env.pod_namespace, "phalanx-system");
  EXPECT_TRUE(env.KnowsOwnPod());
}

TEST(AgentEnv, PodBeingDeleted_GetsOnlyANamedPod) {
  struct Case {
    std::string name;
    std::map<std::string, std::string> vars;
    std::vector<std::string> want_gets;
    bool want_deleting;
  };
  const std::vector<Case> cases = {
      {"both set", {{"POD_NAME", "agent-x"}, {"POD_NAMESPACE", "ns"}}, {"ns/agent-x"}, true},
      {"empty name", {{"POD_NAME", ""}, {"POD_NAMESPACE", "ns"}}, {}, false},
      {"empty namespace", {{"POD_NAME", "agent-x"}, {"POD_NAMESPACE", ""}}, {}, false},
      {"name unset", {{"POD_NAMESPACE", "ns"}}, {}, false},
      {"nothing set", {}, {}, false},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    GetRecorder client;
    EXPECT_EQ(AgentPodIsBeingDeleted(&client, ReadAgentEnv(EnvOf(c.vars))), c.want_deleting);
    EXPECT_EQ(client.gets, c.want_gets);
  }
}

TEST(AgentEnv, PodBeingDeleted_WhenItsPodCannotBeReadAtAll) {
  // helm uninstall: the agent's RBAC and ServiceAccount go beside the DaemonSet, and the pods get
  // SIGTERM after; or the pod is already gone. Neither is a node shutting down.
  const AgentEnv env = ReadAgentEnv(EnvOf({{"POD_NAME", "agent-x"}, {"POD_NAMESPACE", "ns"}}));
  for (const absl::Status& error :
       {absl::PermissionDeniedError("HTTP 403: pods \"agent-x\" is forbidden"),
        absl::UnauthenticatedError("HTTP 401"), absl::NotFoundError("HTTP 404"),
        absl::UnavailableError("connection refused")}) {
    SCOPED_TRACE(error.ToString());
    GetRecorder client;
    client.get_error = error;
    EXPECT_TRUE(AgentPodIsBeingDeleted(&client, env));
  }
}

TEST(AgentEnv, PodBeingDeleted_FalseWithoutAClientOrDeletionTimestamp) {
  const AgentEnv env = ReadAgentEnv(EnvOf({{"POD_NAME", "agent-x"}, {"POD_NAMESPACE", "ns"}}));
  EXPECT_FALSE(AgentPodIsBeingDeleted(nullptr, env));
  GetRecorder client;
  client.pod = kube::Json::parse(R"({"metadata":{"name":"agent-x"}})");
  EXPECT_FALSE(AgentPodIsBeingDeleted(&client, env));
}

}  // namespace
}  // namespace phalanx::agent
