// The container launcher's pure part (container_launch.h): $(VAR) expansion, and what a pod's
// first container becomes as a process (argv, environment, Secret volumes as files). The
// kubelet that runs them is kubelet_test.cc's.
#include "tests/localcluster/container_launch.h"

#include <filesystem>
#include <fstream>
#include <map>

#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/localcluster/pod_testing.h"

namespace phalanx::localcluster {
namespace {

using ::phalanx::testing::IsOk;
using ::phalanx::testing::StatusIs;
using test_pods::ShellPod;
using test_pods::Strings;
using ::testing::HasSubstr;

TEST(ExpandKubeVarsTest, Table) {
  const std::map<std::string, std::string> env = {{"A", "1"}, {"B", "two"}};
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"$(A)", "1"}, {"x-$(B)-y", "x-two-y"}, {"$(C)", "$(C)"}, {"$$(A)", "$(A)"},
      {"$A", "$A"},  {"cost $", "cost $"},    {"$(A", "$(A"},   {"$(A)$(B)", "1two"},
  };
  for (const auto& [in, want] : cases) {
    SCOPED_TRACE(in);
    EXPECT_EQ(ExpandKubeVars(in, env), want);
  }
}

// Issue 16 item 9: the operator mounts credentials as Secret volumes; a process sees the file
// under the pod's volume directory, and env values and flags naming the mountPath point there.
TEST(ContainerLaunchOptionsTest, SecretVolumesAreWrittenAndPathsUnderTheMountRewritten) {
  Json pod = ShellPod("p", "true");
  pod["metadata"]["namespace"] = Json::string("ns");
  pod["spec"]["volumes"] = Json::parse(
      R"([{"name":"tok","secret":{"secretName":"s","items":[{"key":"task-1","path":"token"}]}}])");
  Json& c = pod["spec"]["containers"][0];
  c["command"] = Strings({"sh", "-c", "true", "--token_file=/run/t/token", "/run/t/token"});
  c["env"] = Json::parse(R"([{"name":"F","value":"/run/t/token"},{"name":"G","value":"/run/tx"}])");
  c["volumeMounts"] = Json::parse(R"([{"name":"tok","mountPath":"/run/t","readOnly":true}])");
  auto lookup = [](const std::string& secret,
                   const std::string& key) -> std::optional<std::string> {
    if (secret == "s" && key == "task-1") return "cred-1";
    return std::nullopt;
  };
  const std::string dir = ::testing::TempDir() + "/secret-volumes";
  auto options = ContainerLaunchOptions(pod, "/tmp/x.log", {}, lookup, dir);
  ASSERT_THAT(options, IsOk());
  EXPECT_EQ(options->env.at("F"), dir + "/tok/token");
  EXPECT_EQ(options->env.at("G"), "/run/tx");  // not under the mount
  EXPECT_EQ(options->argv[3], "--token_file=" + dir + "/tok/token");
  EXPECT_EQ(options->argv[4], dir + "/tok/token");
  std::ifstream in(dir + "/tok/token");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text, "cred-1");
  pod["spec"]["volumes"][0]["secret"]["items"][0]["key"] = Json::string("other");
  EXPECT_THAT(ContainerLaunchOptions(pod, "/tmp/x.log", {}, lookup, dir),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("no key \"other\"")));
  // An optional Secret volume leaves a missing key out, as the kubelet does (the operator's
  // clique-ticket volume: a Secret written before the agents had a key holds no tickets).
  pod["spec"]["volumes"][0]["secret"]["optional"] = Json::boolean(true);
  std::filesystem::remove_all(dir);
  ASSERT_THAT(ContainerLaunchOptions(pod, "/tmp/x.log", {}, lookup, dir), IsOk());
  EXPECT_FALSE(std::filesystem::exists(dir + "/tok/token"));
}

// TLS by default (docs/security.md): two volumes of one Secret, each with only its items, as the
// operator's coordinator pod (token; tls.crt and tls.key) and task pods (their credential; ca.crt)
// mount them: a process gets only the listed keys, each volume in its own directory, and the
// flags and env naming either mount point at it.
TEST(ContainerLaunchOptionsTest, EachSecretVolumeHoldsOnlyItsItems) {
  const std::map<std::string, std::string> secret = {
      {"token", "jt"}, {"tls.crt", "CERT"}, {"tls.key", "KEY"}, {"ca.crt", "CA"}};
  auto lookup = [&](const std::string& name, const std::string& key) -> std::optional<std::string> {
    auto it = secret.find(key);
    if (name != "j-token" || it == secret.end()) return std::nullopt;
    return it->second;
  };
  Json pod = ShellPod("p", "true");
  pod["metadata"]["namespace"] = Json::string("ns");
  pod["spec"]["volumes"] = Json::parse(R"([
      {"name":"phalanx-token","secret":{"secretName":"j-token","items":[{"key":"token","path":"token"}]}},
      {"name":"phalanx-tls","secret":{"secretName":"j-token","items":[
          {"key":"tls.crt","path":"tls.crt"},{"key":"tls.key","path":"tls.key"}]}}])");
  Json& c = pod["spec"]["containers"][0];
  c["command"] = Strings({"sh", "-c", "true", "--token_file=/var/run/phalanx/token/token",
                          "--tls_cert_file=/var/run/phalanx/tls/tls.crt",
                          "--tls_key_file=/var/run/phalanx/tls/tls.key"});
  c["env"] =
      Json::parse(R"([{"name":"PHALANX_TLS_CA_FILE","value":"/var/run/phalanx/tls/ca.crt"}])");
  c["volumeMounts"] = Json::parse(R"([
      {"name":"phalanx-token","mountPath":"/var/run/phalanx/token","readOnly":true},
      {"name":"phalanx-tls","mountPath":"/var/run/phalanx/tls","readOnly":true}])");
  const std::string dir = ::testing::TempDir() + "/tls-volumes";
  std::filesystem::remove_all(dir);
  auto options = ContainerLaunchOptions(pod, "/tmp/x.log", {}, lookup, dir);
  ASSERT_THAT(options, IsOk());
  EXPECT_EQ(options->argv[3], "--token_file=" + dir + "/phalanx-token/token");
  EXPECT_EQ(options->argv[4], "--tls_cert_file=" + dir + "/phalanx-tls/tls.crt");
  EXPECT_EQ(options->argv[5], "--tls_key_file=" + dir + "/phalanx-tls/tls.key");
  EXPECT_EQ(options->env.at("PHALANX_TLS_CA_FILE"), dir + "/phalanx-tls/ca.crt");
  auto read = [](const std::string& path) {
    std::ifstream in(path);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  };
  EXPECT_EQ(read(dir + "/phalanx-tls/tls.key"), "KEY");
  EXPECT_EQ(read(dir + "/phalanx-token/token"), "jt");
  EXPECT_FALSE(std::filesystem::exists(dir + "/phalanx-tls/ca.crt")) << "not among its items";
  EXPECT_FALSE(std::filesystem::exists(dir + "/phalanx-token/tls.key"));
}

TEST(ContainerLaunchOptionsTest, ResolvesPathEnvAndRejectsWhatCannotRun) {
  Json pod = ShellPod("p", "true");
  pod["metadata"]["namespace"] = Json::string("ns");
  pod["spec"]["nodeName"] = Json::string("n1");
  pod["spec"]["containers"][0]["command"] = Strings({"sh", "-c", "echo $(WHO)"});
  Json env = Json::array();
  env[0]["name"] = Json::string("WHO");
  env[0]["value"] = Json::string("$(BASE)-x");
  env[1]["name"] = Json::string("NODE");
  env[1]["valueFrom"]["fieldRef"]["fieldPath"] = Json::string("spec.nodeName");
  env[2]["name"] = Json::string("SECRET");
  env[2]["valueFrom"]["secretKeyRef"]["name"] = Json::string("s");
  env[2]["valueFrom"]["secretKeyRef"]["key"] = Json::string("k");
  env[2]["valueFrom"]["secretKeyRef"]["optional"] = Json::boolean(true);
  pod["spec"]["containers"][0]["env"] = env;
  auto options = ContainerLaunchOptions(pod, "/tmp/x.log", {{"BASE", "b"}});
  ASSERT_THAT(options, IsOk());
  EXPECT_EQ(options->argv[0].back(), 'h');
  EXPECT_EQ(options->argv[0].front(), '/') << "found on PATH";
  EXPECT_EQ(options->argv[2], "echo b-x");
  EXPECT_EQ(options->env.at("NODE"), "n1");
  EXPECT_EQ(options->env.at("HOSTNAME"), "p");
  EXPECT_FALSE(options->env.contains("SECRET"));  // optional, and no secret store given

  // The node's own address for status.hostIP (per-node listeners); the pod's stays loopback.
  env[3]["name"] = Json::string("HOST_IP");
  env[3]["valueFrom"]["fieldRef"]["fieldPath"] = Json::string("status.hostIP");
  env[4]["name"] = Json::string("POD_IP");
  env[4]["valueFrom"]["fieldRef"]["fieldPath"] = Json::string("status.podIP");
  pod["spec"]["containers"][0]["env"] = env;
  auto on_node = ContainerLaunchOptions(pod, "/tmp/x.log", {}, nullptr, "", "127.1.0.3");
  ASSERT_THAT(on_node, IsOk());
  EXPECT_EQ(on_node->env.at("HOST_IP"), "127.1.0.3");
  EXPECT_EQ(on_node->env.at("POD_IP"), "127.0.0.1");

  auto lookup = [](const std::string& secret,
                   const std::string& key) -> std::optional<std::string> {
    if (secret == "s" && key == "k") return "from-secret";
    return std::nullopt;
  };
  auto with_secret = ContainerLaunchOptions(pod, "/tmp/x.log", {}, lookup);
  ASSERT_THAT(with_secret, IsOk());
  EXPECT_EQ(with_secret->env.at("SECRET"), "from-secret");
  Json required = pod;
  required["spec"]["containers"][0]["env"][2]["valueFrom"]["secretKeyRef"]["key"] =
      Json::string("missing");
  required["spec"]["containers"][0]["env"][2]["valueFrom"]["secretKeyRef"].erase("optional");
  EXPECT_THAT(ContainerLaunchOptions(required, "/tmp/x.log", {}, lookup),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("secret \"s\"")));
  EXPECT_EQ(options->stdout_path, "/tmp/x.log");
  EXPECT_TRUE(options->kill_group_on_exit);

  Json missing = pod;
  missing["spec"]["containers"][0]["command"] = Strings({"no-such-program-phalanx"});
  EXPECT_THAT(ContainerLaunchOptions(missing, "/tmp/x.log", {}),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("not found in $PATH")));
  Json no_command = pod;
  no_command["spec"]["containers"][0].erase("command");
  EXPECT_THAT(ContainerLaunchOptions(no_command, "/tmp/x.log", {}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("no command")));
  Json bad_ref = pod;
  bad_ref["spec"]["containers"][0]["env"][1]["valueFrom"]["fieldRef"]["fieldPath"] =
      Json::string("spec.nope");
  EXPECT_THAT(ContainerLaunchOptions(bad_ref, "/tmp/x.log", {}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("spec.nope")));
}

}  // namespace
}  // namespace phalanx::localcluster
