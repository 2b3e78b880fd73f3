#include "common/kube/cluster_config.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <random>

#include "absl/strings/escaping.h"
#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace phalanx::kube {
namespace {

using ::phalanx::testing::IsOk;
using ::phalanx::testing::StatusIs;
using ::testing::HasSubstr;

std::string Kubeconfig(const std::string& cluster_extra = "", const std::string& user_extra = "",
                       const std::string& server = "https://127.0.0.1:6443/") {
  return R"(apiVersion: v1
kind: Config
current-context: dev
contexts:
- name: dev
  context:
    cluster: local
    user: admin
    namespace: team-a
- name: other
  context:
    cluster: local
clusters:
- name: local
  cluster:
    server: )" +
         server + "\n" + cluster_extra + R"(
users:
- name: admin
  user:
)" + user_extra +
         "\n";
}

TEST(Kubeconfig, ReadsServerCaTokenAndNamespace) {
  const std::string ca = absl::Base64Escape("-----BEGIN CERTIFICATE-----\nabc\n");
  auto config = ParseKubeconfig(
      Kubeconfig("    certificate-authority-data: " + ca, "    token: s3cret"), "/tmp");
  ASSERT_THAT(config, IsOk());
  EXPECT_EQ(config->server, "https://127.0.0.1:6443");
  EXPECT_EQ(config->ca_pem, "-----BEGIN CERTIFICATE-----\nabc\n");
  EXPECT_EQ(config->token, "s3cret");
  EXPECT_EQ(config->namespace_, "team-a");
  EXPECT_EQ(config->context, "dev");
  EXPECT_FALSE(config->insecure_skip_tls_verify);
}

TEST(Kubeconfig, ContextOverride_AndDefaultNamespace) {
  auto config = ParseKubeconfig(Kubeconfig("    insecure-skip-tls-verify: true"), "", "other");
  ASSERT_THAT(config, IsOk());
  EXPECT_EQ(config->context, "other");
  EXPECT_EQ(config->namespace_, "default");
  EXPECT_TRUE(config->insecure_skip_tls_verify);
  EXPECT_TRUE(config->token.empty());
}

TEST(Kubeconfig, FilesAreResolvedAgainstTheKubeconfigDirectory) {
  const std::string dir =
      std::filesystem::temp_directory_path() / ("kubeconfig-test-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/ca.pem") << "CA";
  std::ofstream(dir + "/client.crt") << "CERT";
  std::ofstream(dir + "/client.key") << "KEY";
  std::ofstream(dir + "/config") << Kubeconfig(
      "    certificate-authority: ca.pem",
      "    client-certificate: client.crt\n    client-key: client.key\n    tokenFile: tok");
  auto config = LoadKubeconfig(dir + "/config");
  std::filesystem::remove_all(dir);
  ASSERT_THAT(config, IsOk());
  EXPECT_EQ(config->ca_pem, "CA");
  EXPECT_EQ(config->client_cert_pem, "CERT");
  EXPECT_EQ(config->client_key_pem, "KEY");
  EXPECT_EQ(config->token_file, dir + "/tok");
}

TEST(Kubeconfig, BadInput_IsAClearErrorNamingTheField) {
  struct Case {
    std::string name;
    std::string yaml;
    std::string context;
    absl::StatusCode code;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"empty", "", "", absl::StatusCode::kInvalidArgument, "not a YAML map"},
      {"not yaml", "{{{: [", "", absl::StatusCode::kInvalidArgument, "not valid YAML"},
      {"a list", "- a\n- b\n", "", absl::StatusCode::kInvalidArgument, "not a YAML map"},
      {"no current context", "apiVersion: v1\n", "", absl::StatusCode::kInvalidArgument,
       "current-context"},
      {"unknown context", Kubeconfig(), "nope", absl::StatusCode::kInvalidArgument,
       "no entry named 'nope' in 'contexts'"},
      {"server missing", Kubeconfig("", "", "\"\""), "", absl::StatusCode::kInvalidArgument,
       "clusters[name=local].cluster.server is missing"},
      {"server not a url", Kubeconfig("", "", "ftp://x"), "", absl::StatusCode::kInvalidArgument,
       "not an http(s) URL"},
      {"bad base64", Kubeconfig("    certificate-authority-data: '!!!'"), "",
       absl::StatusCode::kInvalidArgument, "certificate-authority-data is not base64"},
      {"cert without key", Kubeconfig("", "    client-certificate-data: QUJD"), "",
       absl::StatusCode::kInvalidArgument, "both a client certificate and a client key"},
      {"missing ca file", Kubeconfig("    certificate-authority: /nonexistent/ca"), "",
       absl::StatusCode::kNotFound, "/nonexistent/ca"},
      {"token is a map", Kubeconfig("", "    token: {a: b}"), "",
       absl::StatusCode::kInvalidArgument, "users[name=admin].user.token must be a string"},
      {"insecure not bool", Kubeconfig("    insecure-skip-tls-verify: maybe"), "",
       absl::StatusCode::kInvalidArgument, "true or false"},
      {"clusters not a list", "current-context: a\ncontexts: 3\n", "",
       absl::StatusCode::kInvalidArgument, "'contexts' is missing or not a list"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    EXPECT_THAT(ParseKubeconfig(c.yaml, "", c.context), StatusIs(c.code, HasSubstr(c.message)));
  }
}

TEST(Kubeconfig, Garbage_NeverCrashes) {
  // Fuzz-style: random bytes and random truncations of a valid file must give an error or a
  // config, never a crash or an exception.
  std::mt19937 rng(42);
  const std::string valid = Kubeconfig("", "    token: t");
  for (int i = 0; i < 500; ++i) {
    std::string input;
    if (i % 2 == 0) {
      input = valid.substr(0, rng() % valid.size());
    } else {
      input.resize(rng() % 256);
      for (char& ch : input) ch = static_cast<char>(rng() % 256);
    }
    absl::StatusOr<ClusterConfig> config = ParseKubeconfig(input, "");
    if (!config.ok()) {
      EXPECT_TRUE(absl::IsInvalidArgument(config.status()) || absl::IsNotFound(config.status()))
          << config.status();
    }
  }
}

TEST(InClusterConfig, ReadsServiceAccountFiles) {
  const std::string dir =
      std::filesystem::temp_directory_path() / ("sa-test-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/token") << "tok";
  std::ofstream(dir + "/ca.crt") << "CA";
  std::ofstream(dir + "/namespace") << "jobs\n";
  std::map<std::string, std::string> env = {{"KUBERNETES_SERVICE_HOST", "fd00::1"},
                                            {"KUBERNETES_SERVICE_PORT", "443"}};
  auto getenv = [&](const std::string& k) -> std::optional<std::string> {
    auto it = env.find(k);
    if (it == env.end()) return std::nullopt;
    return it->second;
  };
  auto config = InClusterConfig(getenv, dir);
  ASSERT_THAT(config, IsOk());
  EXPECT_EQ(config->server, "https://[fd00::1]:443");
  EXPECT_EQ(config->ca_pem, "CA");
  EXPECT_EQ(config->token_file, dir + "/token");
  EXPECT_EQ(config->namespace_, "jobs");
  env.clear();
  EXPECT_THAT(InClusterConfig(getenv, dir),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("--kubeconfig")));
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace phalanx::kube
