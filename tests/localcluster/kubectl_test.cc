// kubectl end to end: the real kubectl binary against the `phalanx-localcluster` binary through
// the kubeconfig it writes. Skips (with the reason) where /usr/bin/kubectl is not installed.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <filesystem>
#include <fstream>
#include <optional>
#include <regex>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/process/subprocess.h"
#include "common/testing/eventually.h"
#include "tests/e2e/shared_cluster.h"

namespace phalanx::localcluster {
namespace {

using ::testing::HasSubstr;

constexpr char kKubectl[] = "/usr/bin/kubectl";
const std::string kCluster =
    std::string(PHALANX_BUILD_DIR) + "/tests/localcluster/phalanx-localcluster";

struct Result {
  int exit_code = -1;
  std::string out;  // stdout and stderr
};

constexpr char kCrd[] = R"(apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.dev
spec:
  group: example.dev
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget, shortNames: [wd]}
  versions:
  - name: v1
    served: true
    storage: true
    subresources: {status: {}}
    additionalPrinterColumns:
    - {name: Size, type: integer, jsonPath: .spec.size}
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            required: [size]
            properties:
              size: {type: integer, minimum: 1}
)";

class KubectlTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(kKubectl))
      GTEST_SKIP() << "kubectl is not installed at " << kKubectl;
    dir_ = std::filesystem::temp_directory_path() / absl::StrCat("phalanx-kubectl-test-", getpid());
    std::filesystem::create_directories(dir_);
    // Each case works in a namespace of its own, so that a shared cluster (the CTest fixture
    // e2e_shared_cluster, found through PHALANX_E2E_SHARED_CLUSTER) suffices; the binary run by
    // hand starts a cluster of its own.
    // (The pid and the case's number in this process: run by hand, all cases share one pid.)
    static int cases_in_this_process = 0;
    namespace_ = absl::StrCat("kubectl-", getpid(), "-", cases_in_this_process++);
    absl::StatusOr<std::optional<phalanx::testing::SharedCluster>> shared =
        phalanx::testing::SharedClusterFromEnv();
    ASSERT_TRUE(shared.ok()) << shared.status();
    if (shared->has_value()) {
      kubeconfig_ = (*shared)->kubeconfig;
      backend_ = (*shared)->backend;
    } else {
      ASSERT_NO_FATAL_FAILURE(StartOwnCluster());
    }
    Result r = Kubectl({"create", "namespace", namespace_});
    ASSERT_EQ(r.exit_code, 0) << r.out;
  }

  void TearDown() override {
    // A shared cluster outlives the case: leave it as it was found (the namespace controller
    // deletes what is left in the namespace).
    if (cluster_ == nullptr && !kubeconfig_.empty()) {
      Kubectl({"delete", "namespace", namespace_, "--wait=false"});
    }
  }

  void StartOwnCluster() {
    kubeconfig_ = (dir_ / "kubeconfig").string();
    process::SubprocessOptions options;
    options.argv = {kCluster,     "--kubeconfig-out",       kubeconfig_,
                    "--work-dir", (dir_ / "work").string(), "--nodes",
                    "1",          "--gpus-per-node",        "2"};
    options.stderr_path = (dir_ / "localcluster.log").string();
    absl::StatusOr<std::unique_ptr<process::Subprocess>> cluster =
        process::Subprocess::Start(options);
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = *std::move(cluster);
    std::optional<std::string> ready = cluster_->WaitForLine(
        [](const std::string& l) { return absl::StartsWith(l, "ready "); }, absl::Seconds(180));
    ASSERT_TRUE(ready.has_value()) << "phalanx-localcluster did not print ready";
    backend_ = phalanx::testing::ReadyLineField(*ready, "backend");
  }

  // `kubectl apply -f path` of a CRD named `crd`, then polls until it is Established: a real API
  // server serves the new resource (and lists it in discovery) only then. (`kubectl wait --for
  // condition=...` fails outright while the CRD has no status.conditions yet.)
  void ApplyCrd(const std::string& path, const std::string& crd) {
    Result r = Kubectl({"apply", "-f", path});
    ASSERT_EQ(r.exit_code, 0) << r.out;
    ASSERT_TRUE(phalanx::testing::Eventually(
        [&] {
          r = Kubectl({"get", "crd", crd, "-o",
                       R"(jsonpath={.status.conditions[?(@.type=="Established")].status})"});
          return r.exit_code == 0 && absl::StrContains(r.out, "True");
        },
        absl::Seconds(60)))
        << r.out;
  }

  std::string Write(const std::string& name, const std::string& text) {
    const std::string path = (dir_ / name).string();
    std::ofstream(path) << text;
    return path;
  }

  process::SubprocessOptions KubectlOptions(std::vector<std::string> args) {
    process::SubprocessOptions options;
    options.argv = {kKubectl,
                    "--kubeconfig",
                    kubeconfig_,
                    "--cache-dir",
                    (dir_ / "cache").string(),
                    "--request-timeout",
                    "30s",
                    "--namespace",
                    namespace_};
    options.argv.insert(options.argv.end(), args.begin(), args.end());
    options.stderr_path = (dir_ / "kubectl.err").string();
    return options;
  }

  Result Kubectl(std::vector<std::string> args) { return Run(KubectlOptions(std::move(args))); }

  Result Run(process::SubprocessOptions options) {
    const std::string err_path = options.stderr_path;
    std::filesystem::remove(err_path);
    Result result;
    absl::StatusOr<std::unique_ptr<process::Subprocess>> p = process::Subprocess::Start(options);
    if (!p.ok()) return result;
    if (!(*p)->Wait(absl::Seconds(60)).has_value()) {
      (*p)->Signal(SIGKILL);
      (*p)->Wait(absl::Seconds(5));
      result.out = "timed out: " + absl::StrJoin(options.argv, " ");
      return result;
    }
    result.exit_code = (*p)->ExitCode().value_or(-1);
    std::stringstream err;
    err << std::ifstream(err_path).rdbuf();
    result.out = absl::StrJoin((*p)->Lines(), "\n") + "\n" + err.str();
    return result;
  }

  std::filesystem::path dir_;
  std::string kubeconfig_;
  std::string namespace_;
  std::string backend_;                           // "real" or "builtin", from the ready line
  std::unique_ptr<process::Subprocess> cluster_;  // none when the cluster is shared
};

TEST_F(KubectlTest, AppliesACrdAndCustomResourcesWithServerSideValidation) {
  ApplyCrd(Write("crd.yaml", kCrd), "widgets.example.dev");
  Result r = Kubectl({"apply", "-f",
                      Write("w1.yaml",
                            "apiVersion: example.dev/v1\nkind: Widget\n"
                            "metadata: {name: w1}\nspec: {size: 3}\n")});
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("widget.example.dev/w1 created"));

  r = Kubectl({"apply", "-f",
               Write("bad.yaml",
                     "apiVersion: example.dev/v1\nkind: Widget\n"
                     "metadata: {name: w2}\nspec: {size: 0}\n")});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.out, HasSubstr("spec.size"));

  // The short name, and the CRD's printer column. Polled, as for `get tj` below.
  ASSERT_TRUE(phalanx::testing::Eventually(
      [&] {
        r = Kubectl({"get", "wd"});
        return r.exit_code == 0 && absl::StrContains(r.out, "w1");
      },
      absl::Seconds(30)))
      << r.out;
  EXPECT_THAT(r.out, HasSubstr("SIZE"));
  EXPECT_THAT(r.out, ::testing::ContainsRegex("w1 +3"));

  // Re-applying a change is a patch.
  r = Kubectl({"apply", "-f",
               Write("w1.yaml",
                     "apiVersion: example.dev/v1\nkind: Widget\n"
                     "metadata: {name: w1}\nspec: {size: 5}\n")});
  ASSERT_EQ(r.exit_code, 0) << r.out;
  r = Kubectl({"get", "widget", "w1", "-o", "yaml"});
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("size: 5"));
  EXPECT_THAT(r.out, HasSubstr("generation: 2"));

  r = Kubectl({"delete", "widget", "w1"});
  ASSERT_EQ(r.exit_code, 0) << r.out;
  r = Kubectl({"get", "widget", "w1"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.out, HasSubstr("NotFound"));
}

// The TrainingJob CRD as users meet it: `kubectl apply` of every invalid manifest in
// tests/testdata/ fails with the schema's message (its "# expect: " line, or on the real control
// plane its "# expect-real: " line where the two servers word it apart); the example job is
// created and listed under the short name with its printer columns.
TEST_F(KubectlTest, TrainingJobManifestsAreValidatedByKubectlApply) {
  const std::string source = PHALANX_SOURCE_DIR;
  ApplyCrd(source + "/crds/trainingjobs.phalanx.dev.yaml", "trainingjobs.phalanx.dev");
  Result r;
  int invalid = 0;
  for (const auto& entry : std::filesystem::directory_iterator(source + "/tests/testdata")) {
    const std::string name = entry.path().filename().string();
    if (!absl::StartsWith(name, "trainingjob-invalid-")) continue;
    SCOPED_TRACE(name);
    ++invalid;
    std::ifstream in(entry.path());
    std::string line, expect, expect_real;
    bool needs_cel = false;
    while (std::getline(in, line)) {
      if (absl::StartsWith(line, "# expect: ")) expect = line.substr(10);
      if (absl::StartsWith(line, "# expect-real: ")) expect_real = line.substr(15);
      needs_cel |= line == "# needs: cel";
    }
    // scripts/crd_envtest_test.py reads the same line.
    if (backend_ == "real" && !expect_real.empty()) expect = expect_real;
    ASSERT_FALSE(expect.empty()) << "no '# expect: ' line";
    // The built-in API server evaluates no CEL rules (its README says so).
    if (needs_cel && backend_ != "real") continue;
    r = Kubectl({"apply", "-f", entry.path().string()});
    EXPECT_NE(r.exit_code, 0) << r.out;
    EXPECT_THAT(r.out, HasSubstr(expect));
  }
  EXPECT_GE(invalid, 4);
  r = Kubectl({"apply", "-f", source + "/examples/trainingjob.yaml"});
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("trainingjob.phalanx.dev/sample created"));
  // Polled: CI saw a real kube-apiserver answer this first list, seconds after the CRD became
  // Established, with a table of no columns and no rows (kubectl printed "\n", exit 0); the next
  // list is complete. What is asserted is the columns and the row, not the first answer's timing.
  ASSERT_TRUE(phalanx::testing::Eventually(
      [&] {
        r = Kubectl({"get", "tj"});
        return r.exit_code == 0 && absl::StrContains(r.out, "sample");
      },
      absl::Seconds(30)))
      << r.out;
  for (const char* column : {"PHASE", "RESTARTS", "PREEMPTIONS", "AGE"}) {
    EXPECT_THAT(r.out, HasSubstr(column));
  }
  EXPECT_THAT(r.out, HasSubstr("sample"));
}

TEST_F(KubectlTest, GetWatchStreamsChanges) {
  ApplyCrd(Write("crd.yaml", kCrd), "widgets.example.dev");
  ASSERT_EQ(Kubectl({"apply", "-f",
                     Write("w1.yaml",
                           "apiVersion: example.dev/v1\nkind: Widget\n"
                           "metadata: {name: w1}\nspec: {size: 3}\n")})
                .exit_code,
            0);
  absl::StatusOr<std::unique_ptr<process::Subprocess>> watch =
      process::Subprocess::Start(KubectlOptions({"get", "wd", "-w"}));
  ASSERT_TRUE(watch.ok());
  auto has_size = [](int size) {
    // The CRD declares its columns, so there is no trailing Age column: "w1   3".
    return [size](const std::string& line) {
      return std::regex_search(line, std::regex(absl::StrCat("^w1 +", size, "( |$)")));
    };
  };
  ASSERT_TRUE((*watch)->WaitForLine(has_size(3), absl::Seconds(60)));
  Result r = Kubectl({"patch", "wd", "w1", "--type", "merge", "-p", R"({"spec":{"size":7}})"});
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_TRUE((*watch)->WaitForLine(has_size(7), absl::Seconds(60)));
  (*watch)->Signal(SIGTERM);
  (*watch)->Wait(absl::Seconds(10));
}

TEST_F(KubectlTest, PodsRunAsProcessesAndAreDescribedLoggedKilledAndDeleted) {
  const std::string pod = Write("pod.yaml", R"(apiVersion: v1
kind: Pod
metadata: {name: p1}
spec:
  terminationGracePeriodSeconds: 5
  containers:
  - name: main
    image: ignored
    command: ["/bin/sh", "-c"]
    args: ["echo hello from $GREETING; trap 'exit 0' TERM; while true; do sleep 0.1; done"]
    env: [{name: GREETING, value: p1}]
    resources: {limits: {nvidia.com/gpu: 1}}
)");
  Result r = Kubectl({"apply", "-f", pod});
  ASSERT_EQ(r.exit_code, 0) << r.out;
  auto phase = [&] { return Kubectl({"get", "pod", "p1", "-o", "jsonpath={.status.phase}"}).out; };
  ASSERT_TRUE(phalanx::testing::Eventually([&] { return absl::StartsWith(phase(), "Running"); },
                                           absl::Seconds(60)));
  EXPECT_TRUE(phalanx::testing::Eventually(
      [&] {
        return absl::StrContains(Kubectl({"logs", "p1"}).out, "hello from p1");
      },
      absl::Seconds(30)));
  // The node the scheduler chose (the shared cluster has two) is the one describe names.
  r = Kubectl({"get", "pod", "p1", "-o", "jsonpath={.spec.nodeName}"});
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const std::string node(absl::StripAsciiWhitespace(r.out));
  EXPECT_THAT(node, ::testing::MatchesRegex("node-[0-9]+")) << r.out;
  r = Kubectl({"describe", "pod", "p1"});
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr(node));
  EXPECT_THAT(r.out, HasSubstr("Running"));
  r = Kubectl({"get", "pods"});
  EXPECT_THAT(r.out, ::testing::ContainsRegex("p1 +1/1 +Running"));

  // Fault injection from the shell: the process dies, the kubelet restarts it (restartPolicy
  // Always).
  process::SubprocessOptions admin;
  admin.argv = {kCluster,    "admin",    "--kubeconfig",
                kubeconfig_, "kill-pod", absl::StrCat(namespace_, "/p1")};
  admin.stderr_path = (dir_ / "admin.err").string();
  r = Run(admin);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_TRUE(phalanx::testing::Eventually(
      [&] {
        return Kubectl({"get", "pod", "p1", "-o",
                        "jsonpath={.status.containerStatuses[0].restartCount}"})
                   .out.rfind("1", 0) == 0;
      },
      absl::Seconds(60)));

  // Graceful delete: the process gets SIGTERM (it traps it and exits), then the pod is gone.
  r = Kubectl({"delete", "pod", "p1", "--wait=true"});
  ASSERT_EQ(r.exit_code, 0) << r.out;
  r = Kubectl({"get", "pod", "p1"});
  EXPECT_THAT(r.out, HasSubstr("NotFound"));
}

TEST_F(KubectlTest, BadCommandLinesAreClearErrors) {
  process::SubprocessOptions options;
  options.argv = {kCluster, "--nodes", "x", "--kubeconfig-out", (dir_ / "k2").string()};
  options.stderr_path = (dir_ / "bad.err").string();
  Result r = Run(options);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.out, HasSubstr("--nodes must be an integer"));
  options.argv = {kCluster, "--nodes", "1"};
  r = Run(options);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.out, HasSubstr("--kubeconfig-out"));
  options.argv = {kCluster, "admin", "--kubeconfig", kubeconfig_, "preempt-node"};
  r = Run(options);
  EXPECT_EQ(r.exit_code, 2);
}

}  // namespace
}  // namespace phalanx::localcluster
