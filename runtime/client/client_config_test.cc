#include "runtime/client/client_config.h"

#include <map>

#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace phalanx::client {
namespace {

using ::phalanx::testing::IsOk;
using ::phalanx::testing::StatusIs;
using ::testing::HasSubstr;

using Env = std::map<std::string, std::string>;

absl::StatusOr<ClientConfig> FromMap(const Env& env) {
  return ClientConfig::FromEnv([&](const std::string& name) -> std::optional<std::string> {
    auto it = env.find(name);
    if (it == env.end()) return std::nullopt;
    return it->second;
  });
}

Env Valid() {
  return {{"PHALANX_COORDINATOR", "coord.j:8470"},
          {"PHALANX_JOB", "j"},
          {"PHALANX_TASK_ID", "3"},
          {"PHALANX_NUM_TASKS", "8"},
          {"PHALANX_INCARNATION", "2"},
          {"PHALANX_TOKEN", "s3cret"}};
}

TEST(ClientConfig, FromEnv_ReadsEveryVariable) {
  auto config = FromMap(Valid());
  ASSERT_THAT(config, IsOk());
  EXPECT_EQ(config->coordinator, "coord.j:8470");
  EXPECT_EQ(config->job, "j");
  EXPECT_EQ(config->task_id, 3);
  EXPECT_EQ(config->num_tasks, 8);
  EXPECT_EQ(config->incarnation, 2u);
  EXPECT_EQ(config->token, "s3cret");
}

TEST(ClientConfig, FromEnv_IncarnationDefaultsToZero) {
  Env env = Valid();
  env.erase("PHALANX_INCARNATION");
  EXPECT_EQ(FromMap(env)->incarnation, 0u);
}

TEST(ClientConfig, FromEnv_BadInput_NamesTheVariable) {
  struct Case {
    std::string name;
    std::string variable;
    std::optional<std::string> value;  // nullopt: unset
    std::string expected;
  };
  const std::vector<Case> cases = {
      {"missing coordinator", "PHALANX_COORDINATOR", std::nullopt, "PHALANX_COORDINATOR"},
      {"coordinator without port", "PHALANX_COORDINATOR", "coord", "host:port"},
      {"missing job", "PHALANX_JOB", std::nullopt, "PHALANX_JOB"},
      {"task id not a number", "PHALANX_TASK_ID", "three", "PHALANX_TASK_ID"},
      {"task id out of range", "PHALANX_TASK_ID", "8", "outside"},
      {"zero tasks", "PHALANX_NUM_TASKS", "0", "at least 1"},
      {"negative incarnation", "PHALANX_INCARNATION", "-1", "PHALANX_INCARNATION"},
      {"no token", "PHALANX_TOKEN", std::nullopt, "token"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    Env env = Valid();
    if (c.value.has_value()) {
      env[c.variable] = *c.value;
    } else {
      env.erase(c.variable);
    }
    EXPECT_THAT(FromMap(env), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(c.expected)));
  }
}

// The name a client verifies the coordinator's certificate as: the operator's
// (PHALANX_TLS_SERVER_NAME) whatever address is dialled, else the address's host.
TEST(CoordinatorTls, TheNameVerifiedIsTheGivenOne_ElseTheHostDialled) {
  EXPECT_EQ(TlsServerName({"ca", "j-coordinator.ns.svc"}, "10.0.0.1:8470"), "j-coordinator.ns.svc");
  EXPECT_EQ(TlsServerName({"ca", ""}, "10.0.0.1:8470"), "10.0.0.1");
  EXPECT_EQ(TlsServerName({"ca", ""}, "[::1]:8470"), "::1");
  EXPECT_EQ(TlsServerName({"ca", ""}, "coordinator.example:8470"), "coordinator.example");
}

}  // namespace
}  // namespace phalanx::client
