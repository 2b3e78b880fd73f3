#include "tests/localcluster/kubelet.h"

#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "common/kube/object_meta.h"
#include "common/testing/eventually.h"
#include "common/testing/fake_clock.h"
#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/localcluster/container_launch.h"
#include "tests/localcluster/pod_testing.h"

namespace phalanx::localcluster {
namespace {

using kube::StringAt;
using ::phalanx::testing::Eventually;
using ::phalanx::testing::IsOk;
using ::phalanx::testing::StatusIs;
using test_pods::ShellPod;
using test_pods::Strings;
using ::testing::HasSubstr;

constexpr absl::Duration kWait = absl::Seconds(20);

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

bool ProcessGone(pid_t pid) { return kill(pid, 0) != 0 && errno == ESRCH; }

// /proc/<pid>/stat's state letter (R, S, T, Z...).
char ProcessState(pid_t pid) {
  const std::string stat = ReadFile("/proc/" + std::to_string(pid) + "/stat");
  const size_t paren = stat.rfind(')');
  return paren == std::string::npos || paren + 2 >= stat.size() ? '?' : stat[paren + 2];
}

// The store seen through a watched cache that lags on one Node: while `Freeze(node)` holds,
// reads of that Node answer the copy it had then (as an informer behind a loaded API server
// does); writes go through.
class LaggingNodeAccess final : public ClusterAccess {
 public:
  explicit LaggingNodeAccess(ClusterAccess& inner) : inner_(inner) {}
  void Freeze(const std::string& node) { frozen_[node] = *inner_.Get("nodes", "", node); }
  void Thaw() { frozen_.clear(); }

  uint64_t Version() const override { return inner_.Version(); }
  void WaitForChange(uint64_t since, absl::Duration max_wait) const override {
    inner_.WaitForChange(since, max_wait);
  }
  absl::StatusOr<std::vector<WatchEvent>> PodEventsSince(uint64_t since) const override {
    return inner_.PodEventsSince(since);
  }
  absl::StatusOr<ListResult> List(const std::string& resource,
                                  const kube::ObjectFilter& filter) const override {
    return inner_.List(resource, filter);
  }
  absl::StatusOr<Json> Get(const std::string& resource, const std::string& ns,
                           const std::string& name) const override {
    if (resource == "nodes" && frozen_.contains(name)) return frozen_.at(name);
    return inner_.Get(resource, ns, name);
  }
  absl::StatusOr<Json> Create(const std::string& resource, const std::string& ns,
                              const Json& object) override {
    return inner_.Create(resource, ns, object);
  }
  absl::StatusOr<Json> Update(const std::string& resource, const std::string& ns,
                              const Json& object, bool status) override {
    return inner_.Update(resource, ns, object, status);
  }
  absl::Status DeletePod(const std::string& ns, const std::string& name, const std::string& uid,
                         std::optional<int64_t> grace) override {
    return inner_.DeletePod(ns, name, uid, grace);
  }
  absl::StatusOr<Json> Bind(const Json& pod, const std::string& node) override {
    return inner_.Bind(pod, node);
  }

 private:
  ClusterAccess& inner_;
  std::map<std::string, Json> frozen_;
};

class KubeletTest : public ::testing::Test {
 protected:
  void SetUp() override {
    store_.EnableStatusSubresource("pods");
    store_.EnableStatusSubresource("nodes");
    log_dir_ = ::testing::TempDir() + "/kubelet_test_" + std::to_string(getpid()) + "_" +
               ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::filesystem::remove_all(log_dir_);
  }
  void TearDown() override {
    kubelet_.reset();
    std::filesystem::remove_all(log_dir_);
  }

  // One process node "node-a" (4 GPUs) unless told otherwise; nodes registered, no thread.
  // `access`: what the kubelet reads and writes through (the store itself unless told).
  void Make(std::vector<NodeConfig> nodes = {}, ClusterAccess* access = nullptr) {
    if (nodes.empty()) nodes.push_back(NodeConfig{"node-a", 4, {{"pool", "gpu"}}, {}, false});
    Kubelet::Options options;
    options.nodes = std::move(nodes);
    options.log_dir = log_dir_;
    options.extra_env = {{"FROM_KUBELET", "yes"}};
    kubelet_ = std::make_unique<Kubelet>(access != nullptr ? *access : access_, clock_, options);
    ASSERT_THAT(kubelet_->RegisterNodes(), IsOk());
  }
  void Create(const Json& pod) { ASSERT_THAT(store_.Create("pods", "ns", pod), IsOk()); }
  std::optional<Json> Pod(const std::string& name) {
    absl::StatusOr<Json> pod = store_.Get("pods", "ns", name);
    if (!pod.ok()) return std::nullopt;
    return *pod;
  }
  std::string Phase(const std::string& name) {
    std::optional<Json> pod = Pod(name);
    return pod.has_value() ? StringAt(*pod, "status.phase") : "<gone>";
  }
  Json Container(const std::string& name) {
    return Pod(name)->at("status").at("containerStatuses").at(0);
  }
  std::string Condition(const std::string& name, const std::string& type,
                        const std::string& field = "status") {
    std::optional<Json> pod = Pod(name);
    if (!pod.has_value() || !pod->has_field("status")) return "";
    for (const Json& c : pod->at("status").at("conditions").as_array()) {
      if (StringAt(c, "type") == type) return StringAt(c, field);
    }
    return "";
  }
  // Passes until `done` holds (processes take real time to start and exit).
  bool SyncUntil(const std::function<bool()>& done, absl::Duration timeout = kWait) {
    return Eventually(
        [&] {
          kubelet_->SyncOnce();
          return done();
        },
        timeout);
  }
  std::string Log(const std::string& pod) { return ReadFile(log_dir_ + "/ns_" + pod + ".log"); }
  // Creates pod `name`, starts it, and waits until its script has said "ready" (its traps set).
  bool StartUntilReady(const std::string& name, const Json& pod) {
    Create(pod);
    kubelet_->SyncOnce();
    return Eventually([&] { return Log(name).find("ready") != std::string::npos; }, kWait);
  }

  phalanx::testing::FakeClock clock_;
  ObjectStore store_{clock_};
  StoreAccess access_{store_, clock_};
  std::string log_dir_;
  std::unique_ptr<Kubelet> kubelet_;
};

TEST_F(KubeletTest, RegisterNodes_WritesNodeObjects) {
  Json taint = Json::object();
  taint["key"] = Json::string("dedicated");
  taint["value"] = Json::string("phalanx");
  taint["effect"] = Json::string("NoSchedule");
  Make({NodeConfig{"node-a", 4, {{"pool", "gpu"}}, {taint}, false},
        NodeConfig{"sim-0", 8, {}, {}, true}});
  auto node = store_.Get("nodes", "", "node-a");
  ASSERT_THAT(node, IsOk());
  EXPECT_EQ(kube::LabelsOf(*node).at("pool"), "gpu");
  EXPECT_EQ(kube::LabelsOf(*node).at("kubernetes.io/hostname"), "node-a");
  EXPECT_EQ(StringAt(node->at("spec").at("taints").at(0), "key"), "dedicated");
  EXPECT_EQ(node->at("status").at("allocatable").at("nvidia.com/gpu").as_string(), "4");
  EXPECT_EQ(node->at("status").at("capacity").at("pods").as_string(), "110");
  const Json& ready = node->at("status").at("conditions").at(0);
  EXPECT_EQ(StringAt(ready, "type"), "Ready");
  EXPECT_EQ(StringAt(ready, "status"), "True");
  EXPECT_FALSE(StringAt(ready, "lastHeartbeatTime").empty());
  EXPECT_EQ(StringAt(*node, "status.nodeInfo.kubeletVersion"), "v1.32.0-phalanx");
  EXPECT_EQ(StringAt(node->at("status").at("addresses").at(0), "address"), "127.0.0.1");
  EXPECT_EQ(store_.Get("nodes", "", "sim-0")->at("status").at("allocatable").at("nvidia.com/gpu"),
            Json::string("8"));
}

TEST_F(KubeletTest, ProcessPod_RunsWithEnvAndWorkingDir_LogsAndReportsRunning) {
  Make();
  Json pod = ShellPod("p1",
                      "echo \"hello $GREETING $MY_NAME $MY_NODE $EXPANDED $FROM_KUBELET $PWD\"; "
                      "exec sleep 1000");
  Json env = Json::array();
  env[0]["name"] = Json::string("GREETING");
  env[0]["value"] = Json::string("hi");
  env[1]["name"] = Json::string("MY_NAME");
  env[1]["valueFrom"]["fieldRef"]["fieldPath"] = Json::string("metadata.name");
  env[2]["name"] = Json::string("MY_NODE");
  env[2]["valueFrom"]["fieldRef"]["fieldPath"] = Json::string("spec.nodeName");
  env[3]["name"] = Json::string("EXPANDED");
  env[3]["value"] = Json::string("$(GREETING)-x");
  pod["spec"]["containers"][0]["env"] = env;
  pod["spec"]["containers"][0]["workingDir"] = Json::string(log_dir_);
  Create(pod);
  kubelet_->SyncOnce();
  EXPECT_EQ(Phase("p1"), "Running");
  EXPECT_EQ(StringAt(*Pod("p1"), "spec.nodeName"), "node-a");
  const std::string want =
      "hello hi p1 node-a hi-x yes " + std::filesystem::canonical(log_dir_).string();
  EXPECT_TRUE(Eventually([&] { return Log("p1").find(want) != std::string::npos; }, kWait))
      << Log("p1");

  Json status = Pod("p1")->at("status");
  EXPECT_EQ(StringAt(status, "podIP"), "127.0.0.1");
  EXPECT_EQ(StringAt(status, "hostIP"), "127.0.0.1");
  EXPECT_FALSE(StringAt(status, "startTime").empty());
  for (const char* type : {"PodScheduled", "Initialized", "ContainersReady", "Ready"}) {
    EXPECT_EQ(Condition("p1", type), "True") << type;
  }
  Json container = Container("p1");
  EXPECT_EQ(StringAt(container, "name"), "main");
  EXPECT_EQ(StringAt(container, "image"), "ignored:latest");
  EXPECT_TRUE(container.at("ready").as_bool());
  EXPECT_TRUE(container.at("started").as_bool());
  EXPECT_EQ(container.at("restartCount").as_integer(), 0);
  EXPECT_FALSE(StringAt(container, "state.running.startedAt").empty());
  ASSERT_TRUE(kubelet_->PodPid("ns", "p1").has_value());

  // Level-triggered: passes over an unchanged pod write nothing.
  const uint64_t version = store_.resource_version();
  for (int i = 0; i < 3; ++i) kubelet_->SyncOnce();
  EXPECT_EQ(store_.resource_version(), version);
}

TEST_F(KubeletTest, ExitZero_Succeeded_ExitThreeWithNever_FailedWithError) {
  Make();
  Create(ShellPod("ok", "exit 0"));
  Create(ShellPod("bad", "echo failing >&2; exit 3"));
  ASSERT_TRUE(SyncUntil([&] { return Phase("ok") == "Succeeded" && Phase("bad") == "Failed"; }));
  EXPECT_EQ(Container("ok").at("state").at("terminated").at("exitCode").as_integer(), 0);
  EXPECT_EQ(StringAt(Container("ok"), "state.terminated.reason"), "Completed");
  EXPECT_EQ(Condition("ok", "Ready"), "False");
  EXPECT_EQ(Condition("ok", "Ready", "reason"), "PodCompleted");
  Json bad = Container("bad");
  EXPECT_EQ(bad.at("state").at("terminated").at("exitCode").as_integer(), 3);
  EXPECT_EQ(StringAt(bad, "state.terminated.reason"), "Error");
  EXPECT_FALSE(StringAt(bad, "state.terminated.finishedAt").empty());
  EXPECT_FALSE(bad.at("ready").as_bool());
  EXPECT_THAT(Log("bad"), HasSubstr("failing")) << "stderr shares the log";
}

// A failed container with terminationMessagePolicy FallbackToLogsOnError gets its log's tail as
// its termination message, as a real kubelet gives it (how a coordinator's "cannot listen"
// reaches status.coordinator.lastExitMessage on the local cluster); other containers get none.
TEST_F(KubeletTest, FallbackToLogsOnError_PutsTheLogTailInTheTerminationMessage) {
  Make();
  Json pod =
      ShellPod("fallback", "echo starting; echo 'cannot listen on 0.0.0.0:20470' >&2; exit 2");
  pod["spec"]["containers"][0]["terminationMessagePolicy"] = Json::string("FallbackToLogsOnError");
  Create(pod);
  Create(ShellPod("plain", "echo 'cannot listen' >&2; exit 2"));
  ASSERT_TRUE(
      SyncUntil([&] { return Phase("fallback") == "Failed" && Phase("plain") == "Failed"; }));
  EXPECT_EQ(StringAt(Container("fallback"), "state.terminated.message"),
            "starting\ncannot listen on 0.0.0.0:20470");
  EXPECT_EQ(StringAt(Container("plain"), "state.terminated.message"), "");
}

// The log file is shared by every run of a container (and by a recreated pod of the same name,
// as the operator recreates a coordinator): the message holds only the run that failed. Seen on
// the local cluster: a coordinator refused at start four times showed all four runs' lines.
TEST_F(KubeletTest, FallbackToLogsOnError_HoldsOnlyTheFailedRunsLines) {
  Make();
  const std::string counter = log_dir_ + "/again-runs";
  Json pod = ShellPod("again",
                      "n=$(cat " + counter + " 2>/dev/null || echo 0); echo $((n+1)) > " + counter +
                          "; echo \"run $n refused\" >&2; exit 2",
                      "OnFailure");
  pod["spec"]["containers"][0]["terminationMessagePolicy"] = Json::string("FallbackToLogsOnError");
  Create(pod);
  ASSERT_TRUE(SyncUntil(
      [&] { return StringAt(Container("again"), "state.waiting.reason") == "CrashLoopBackOff"; }));
  EXPECT_EQ(StringAt(Container("again"), "lastState.terminated.message"), "run 0 refused");
  clock_.Advance(absl::Seconds(1));  // the back-off runs on the injected clock
  ASSERT_TRUE(SyncUntil([&] {
    const Json c = Container("again");
    return c.at("restartCount").as_integer() == 1 &&
           StringAt(c, "state.waiting.reason") == "CrashLoopBackOff";
  }));
  EXPECT_EQ(StringAt(Container("again"), "lastState.terminated.message"), "run 1 refused");
  EXPECT_THAT(Log("again"), HasSubstr("run 0 refused")) << "the log keeps every run";
}

// A Secret (or key) the pod needs that is not there yet keeps the pod Pending, retried, as a real
// kubelet does (FailedMount / CreateContainerConfigError): it never fails the pod. Seen trying a
// squatting token Secret as a user: the local kubelet failed every task pod (exit 128) and the
// job ran out of restarts, where a real cluster would have waited for the Secret to be fixed.
TEST_F(KubeletTest, AMissingSecretKeyKeepsThePodWaitingUntilItAppears) {
  Make();
  Json pod = ShellPod("needs-secret", "echo mounted");
  pod["spec"]["volumes"] = Json::parse(
      R"([{"name":"tok","secret":{"secretName":"s","items":[{"key":"task-0","path":"token"}]}}])");
  pod["spec"]["containers"][0]["volumeMounts"] =
      Json::parse(R"([{"name":"tok","mountPath":"/var/run/s"}])");
  Json env_pod = ShellPod("needs-env", "true");
  env_pod["spec"]["containers"][0]["env"] =
      Json::parse(R"([{"name":"T","valueFrom":{"secretKeyRef":{"name":"s","key":"task-0"}}}])");
  Create(pod);
  Create(env_pod);
  for (int i = 0; i < 3; ++i) kubelet_->SyncOnce();
  EXPECT_EQ(Phase("needs-secret"), "Pending");
  EXPECT_EQ(StringAt(Container("needs-secret"), "state.waiting.reason"), "ContainerCreating");
  EXPECT_THAT(StringAt(Container("needs-secret"), "state.waiting.message"),
              HasSubstr("has no key \"task-0\""));
  EXPECT_EQ(Phase("needs-env"), "Pending");
  EXPECT_EQ(StringAt(Container("needs-env"), "state.waiting.reason"), "CreateContainerConfigError");
  Json secret = Json::parse(
      R"({"apiVersion":"v1","kind":"Secret","metadata":{"name":"s"},"data":{"task-0":"c2VjcmV0"}})");
  ASSERT_THAT(store_.Create("secrets", "ns", secret), IsOk());
  ASSERT_TRUE(SyncUntil(
      [&] { return Phase("needs-secret") == "Succeeded" && Phase("needs-env") == "Succeeded"; }));
  EXPECT_THAT(Log("needs-secret"), HasSubstr("mounted"));
}

TEST_F(KubeletTest, MissingCommand_ContainerCannotRun) {
  Make();
  Json pod = ShellPod("nocmd", "");
  pod["spec"]["containers"][0].erase("command");
  Create(pod);
  kubelet_->SyncOnce();
  EXPECT_EQ(Phase("nocmd"), "Failed");
  EXPECT_EQ(StringAt(Container("nocmd"), "state.terminated.reason"), "ContainerCannotRun");
  EXPECT_THAT(StringAt(Container("nocmd"), "state.terminated.message"), HasSubstr("no command"));
}

// A real kubelet cannot parse such an image and leaves the container waiting with
// InvalidImageName for ever (the pod never fails); the operator's failure policy acts on it.
TEST_F(KubeletTest, InvalidImageReference_WaitsWithInvalidImageName) {
  Make();
  Json pod = ShellPod("badimage", "exit 0");
  pod["spec"]["containers"][0]["image"] = Json::string("Registry.Example/Team/Trainer:v1");
  Create(pod);
  Create(ShellPod("goodimage", "exit 0"));
  ASSERT_TRUE(SyncUntil([&] { return Phase("goodimage") == "Succeeded"; }));
  kubelet_->SyncOnce();
  EXPECT_EQ(Phase("badimage"), "Pending");
  EXPECT_EQ(StringAt(Container("badimage"), "state.waiting.reason"), "InvalidImageName");
  EXPECT_THAT(StringAt(Container("badimage"), "state.waiting.message"),
              HasSubstr("couldn't parse image reference"));
}

TEST(CheckImageReference, Table) {
  for (const char* good :
       {"ignored:latest", "busybox", "registry.example.com:5000/team/trainer:v1.2-rc_3",
        "localhost/a__b/c-d", "ghcr.io/org/img@sha256:0123456789abcdef0123456789abcdef",
        "Registry.Example/team/x"}) {
    SCOPED_TRACE(good);
    EXPECT_THAT(CheckImageReference(good), IsOk());
  }
  for (const char* bad : {"Team/Trainer", "trainer:", "a b", "img:tag:tag", "-lead", "x@sha256:zz",
                          "trainer:-dash"}) {
    SCOPED_TRACE(bad);
    EXPECT_THAT(CheckImageReference(bad), StatusIs(absl::StatusCode::kInvalidArgument));
  }
}

TEST_F(KubeletTest, OnFailure_RestartsAfterBackOff_CountingRestarts) {
  Make();
  // Fails on its first run, succeeds on its second.
  const std::string counter = log_dir_ + "/runs";
  Create(ShellPod("flaky",
                  "n=$(cat " + counter + " 2>/dev/null || echo 0); echo $((n+1)) > " + counter +
                      "; [ \"$n\" -ge 1 ] && exit 0; exit 3",
                  "OnFailure"));
  ASSERT_TRUE(SyncUntil(
      [&] { return StringAt(Container("flaky"), "state.waiting.reason") == "CrashLoopBackOff"; }));
  Json waiting = Container("flaky");
  EXPECT_EQ(waiting.at("lastState").at("terminated").at("exitCode").as_integer(), 3);
  EXPECT_EQ(waiting.at("restartCount").as_integer(), 0);
  EXPECT_EQ(Phase("flaky"), "Running");
  EXPECT_EQ(Condition("flaky", "Ready"), "False");
  EXPECT_THAT(StringAt(waiting, "state.waiting.message"), HasSubstr("back-off 1s"));
  kubelet_->SyncOnce();
  EXPECT_EQ(StringAt(Container("flaky"), "state.waiting.reason"), "CrashLoopBackOff")
      << "the back-off runs on the injected clock";

  clock_.Advance(absl::Seconds(1));
  ASSERT_TRUE(SyncUntil([&] { return Phase("flaky") == "Succeeded"; }));
  EXPECT_EQ(Container("flaky").at("restartCount").as_integer(), 1);
  EXPECT_EQ(Container("flaky").at("lastState").at("terminated").at("exitCode").as_integer(), 3);
}

TEST_F(KubeletTest, GracefulDelete_TermTrappingProcessExits_PodDisappears) {
  Make();
  Create(ShellPod("polite",
                  "trap 'echo got-term; exit 0' TERM; echo ready; "
                  "while true; do sleep 0.05; done"));
  kubelet_->SyncOnce();
  ASSERT_TRUE(Eventually([&] { return Log("polite").find("ready") != std::string::npos; }, kWait));
  const pid_t pid = *kubelet_->PodPid("ns", "polite");
  auto marked = store_.Delete("pods", "ns", "polite");
  ASSERT_THAT(marked, IsOk());
  EXPECT_EQ(marked->at("metadata").at("deletionGracePeriodSeconds").as_integer(), 30);
  ASSERT_TRUE(SyncUntil([&] { return !Pod("polite").has_value(); })) << "SIGTERM, no clock needed";
  EXPECT_THAT(Log("polite"), HasSubstr("got-term"));
  EXPECT_TRUE(ProcessGone(pid));
}

// As a real kubelet (pinned by node_pod_lifecycle_table): how the container ended, and the
// terminal phase, are written before the pod goes, so a watcher's last sight of the pod says
// whether SIGTERM (here: exit 0) or the SIGKILL after the grace period (137) ended it.
TEST_F(KubeletTest, GracefulDelete_TheLastSightOfThePodSaysHowItsContainerEnded) {
  Make();
  ASSERT_TRUE(StartUntilReady(
      "polite",
      ShellPod("polite", "trap 'exit 0' TERM; echo ready; while true; do sleep 0.05; done", "Never",
               5)));
  ASSERT_TRUE(StartUntilReady(
      "stubborn", ShellPod("stubborn", "trap '' TERM; echo ready; while true; do sleep 0.05; done",
                           "Never", 5)));
  const uint64_t before = access_.Version();
  ASSERT_THAT(store_.Delete("pods", "ns", "polite"), IsOk());
  ASSERT_THAT(store_.Delete("pods", "ns", "stubborn"), IsOk());
  ASSERT_TRUE(SyncUntil([&] { return !Pod("polite").has_value(); }));
  clock_.Advance(absl::Seconds(5));
  ASSERT_TRUE(SyncUntil([&] { return !Pod("stubborn").has_value(); }));

  absl::StatusOr<std::vector<WatchEvent>> events = access_.PodEventsSince(before);
  ASSERT_THAT(events, IsOk());
  std::map<std::string, Json> gone;
  for (const WatchEvent& e : *events) {
    if (e.type == "DELETED") gone[StringAt(e.object, "metadata.name")] = e.object;
  }
  ASSERT_EQ(gone.size(), 2u);
  const Json polite = gone["polite"].at("status").at("containerStatuses").at(0);
  EXPECT_EQ(polite.at("state").at("terminated").at("exitCode").as_integer(), 0);
  EXPECT_EQ(StringAt(gone["polite"], "status.phase"), "Succeeded");
  const Json stubborn = gone["stubborn"].at("status").at("containerStatuses").at(0);
  EXPECT_EQ(stubborn.at("state").at("terminated").at("exitCode").as_integer(), 137);
  EXPECT_EQ(StringAt(gone["stubborn"], "status.phase"), "Failed");
}

TEST_F(KubeletTest, GracefulDelete_TermIgnoringProcess_KilledWhenGraceEnds) {
  Make();
  ASSERT_TRUE(StartUntilReady(
      "stubborn", ShellPod("stubborn", "trap '' TERM; echo ready; while true; do sleep 0.05; done",
                           "Never", 5)));
  const pid_t pid = *kubelet_->PodPid("ns", "stubborn");
  ASSERT_THAT(store_.Delete("pods", "ns", "stubborn"), IsOk());
  for (int i = 0; i < 20; ++i) {
    kubelet_->SyncOnce();
    absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_TRUE(Pod("stubborn").has_value()) << "still in its grace period";
  EXPECT_FALSE(ProcessGone(pid));
  clock_.Advance(absl::Seconds(5));
  ASSERT_TRUE(SyncUntil([&] { return !Pod("stubborn").has_value(); }));
  EXPECT_TRUE(ProcessGone(pid));
}

TEST_F(KubeletTest, KillPod_SignalsTheProcess_AndErrorsWithoutOne) {
  Make();
  Create(ShellPod("victim", "exec sleep 1000"));
  kubelet_->SyncOnce();
  EXPECT_THAT(kubelet_->KillPod("ns", "nobody"), StatusIs(absl::StatusCode::kNotFound));
  ASSERT_THAT(kubelet_->KillPod("ns", "victim"), IsOk());
  ASSERT_TRUE(SyncUntil([&] { return Phase("victim") == "Failed"; }));
  Json terminated = Container("victim").at("state").at("terminated");
  EXPECT_EQ(terminated.at("exitCode").as_integer(), 137);
  EXPECT_EQ(terminated.at("signal").as_integer(), SIGKILL);
  EXPECT_EQ(StringAt(terminated, "reason"), "Error");
  EXPECT_THAT(kubelet_->KillPod("ns", "victim"), StatusIs(absl::StatusCode::kFailedPrecondition));
}

TEST_F(KubeletTest, StopPodAndContinuePod_FreezeAndThawTheProcess) {
  Make();
  Create(ShellPod("frozen", "exec sleep 1000"));
  kubelet_->SyncOnce();
  const pid_t pid = *kubelet_->PodPid("ns", "frozen");
  ASSERT_THAT(kubelet_->StopPod("ns", "frozen"), IsOk());
  EXPECT_TRUE(Eventually([&] { return ProcessState(pid) == 'T'; }, kWait));
  kubelet_->SyncOnce();
  EXPECT_EQ(Phase("frozen"), "Running") << "a stopped process is still running to Kubernetes";
  ASSERT_THAT(kubelet_->ContinuePod("ns", "frozen"), IsOk());
  EXPECT_TRUE(Eventually([&] { return ProcessState(pid) == 'S'; }, kWait));
}

TEST_F(KubeletTest, SetNodeReady_FlipsNodeAndPodReadiness_ProcessKeepsRunning) {
  Make();
  Create(ShellPod("p", "exec sleep 1000"));
  kubelet_->SyncOnce();
  const pid_t pid = *kubelet_->PodPid("ns", "p");
  ASSERT_THAT(kubelet_->SetNodeReady("node-a", false), IsOk());
  auto node = store_.Get("nodes", "", "node-a");
  EXPECT_EQ(StringAt(node->at("status").at("conditions").at(0), "status"), "False");
  kubelet_->SyncOnce();
  EXPECT_EQ(Condition("p", "Ready"), "False");
  EXPECT_EQ(Condition("p", "ContainersReady"), "True");
  EXPECT_EQ(kubelet_->PodPid("ns", "p"), pid);
  EXPECT_FALSE(ProcessGone(pid));
  ASSERT_THAT(kubelet_->SetNodeReady("node-a", true), IsOk());
  kubelet_->SyncOnce();
  EXPECT_EQ(Condition("p", "Ready"), "True");
  EXPECT_THAT(kubelet_->SetNodeReady("nowhere", true), StatusIs(absl::StatusCode::kNotFound));
}

TEST_F(KubeletTest, PreemptNode_TaintsMarksThenEvictsAfterGrace) {
  Make();
  ASSERT_TRUE(StartUntilReady(
      "worker",
      ShellPod("worker", "trap 'exit 0' TERM; echo ready; while true; do sleep 0.05; done")));
  ASSERT_THAT(kubelet_->PreemptNode("node-a", absl::Seconds(30)), IsOk());
  auto node = store_.Get("nodes", "", "node-a");
  const Json& taint = node->at("spec").at("taints").at(0);
  EXPECT_EQ(StringAt(taint, "key"), "cloud.google.com/impending-node-termination");
  EXPECT_EQ(StringAt(taint, "value"), "true");
  EXPECT_EQ(StringAt(taint, "effect"), "NoSchedule");
  EXPECT_FALSE(node->at("spec").has_field("unschedulable"));

  kubelet_->SyncOnce();
  EXPECT_EQ(Condition("worker", "DisruptionTarget"), "True");
  EXPECT_EQ(Condition("worker", "DisruptionTarget", "reason"), "TerminationByKubelet");
  EXPECT_EQ(Condition("worker", "DisruptionTarget", "message"), "node is being preempted");
  EXPECT_FALSE(kube::IsBeingDeleted(*Pod("worker")));
  // Nothing new lands on the tainted node.
  Create(ShellPod("latecomer", "true"));
  kubelet_->SyncOnce();
  EXPECT_THAT(Condition("latecomer", "PodScheduled", "message"),
              HasSubstr("untolerated taint {cloud.google.com/impending-node-termination: true}"));

  clock_.Advance(absl::Seconds(30));
  kubelet_->SyncOnce();
  ASSERT_TRUE(Pod("worker").has_value());
  EXPECT_TRUE(kube::IsBeingDeleted(*Pod("worker")));
  ASSERT_TRUE(SyncUntil([&] { return !Pod("worker").has_value(); }));
}

// A task that checkpoints and exits during the grace (the normal preemption path) leaves a
// finished pod; the node's end takes it too, as it does on a cloud (the operator's e2e test
// waited for that pod to go and failed when the task was faster than the eviction).
TEST_F(KubeletTest, PreemptNode_APodThatFinishedDuringTheGraceIsRemovedWithTheNode) {
  Make();
  ASSERT_TRUE(StartUntilReady(
      "quitter",
      ShellPod("quitter", "trap 'exit 4' TERM; echo ready; while true; do sleep 0.05; done")));
  ASSERT_THAT(kubelet_->PreemptNode("node-a", absl::Seconds(30)), IsOk());
  ASSERT_THAT(kubelet_->KillPod("ns", "quitter", SIGTERM), IsOk());
  ASSERT_TRUE(SyncUntil([&] { return Phase("quitter") == "Failed"; }));
  EXPECT_FALSE(kube::IsBeingDeleted(*Pod("quitter"))) << "not before the grace ends";

  clock_.Advance(absl::Seconds(30));
  ASSERT_TRUE(SyncUntil([&] { return !Pod("quitter").has_value(); }));
}

// Issue 13: a preemption taint removed by hand came back at the next resync, and every pod the
// scheduler placed on the untainted node in between was evicted at once (the operator moved a
// task six times in a second). Removing it calls the preemption off.
TEST_F(KubeletTest, PreemptionTaintRemovedByHand_CallsThePreemptionOff) {
  Make({NodeConfig{"node-a", 4, {}, {}, true}, NodeConfig{"node-b", 4, {}, {}, true}});
  Create(ShellPod("first", "ignored", "Always"));
  kubelet_->SyncOnce();
  ASSERT_EQ(StringAt(*Pod("first"), "spec.nodeName"), "node-a");
  ASSERT_THAT(kubelet_->PreemptNode("node-a", absl::Seconds(10)), IsOk());
  kubelet_->SyncOnce();
  EXPECT_EQ(Condition("first", "DisruptionTarget"), "True");

  // kubectl taint nodes node-a cloud.google.com/impending-node-termination-
  clock_.Advance(absl::Seconds(2));
  Json node = *store_.Get("nodes", "", "node-a");
  node["spec"]["taints"] = Json::array();
  ASSERT_THAT(store_.Update("nodes", "", node, false), IsOk());
  // A new pod lands on the untainted node (node-a wins the tie by name).
  Create(ShellPod("replacement", "ignored", "Always"));
  kubelet_->SyncOnce();
  ASSERT_EQ(StringAt(*Pod("replacement"), "spec.nodeName"), "node-a");
  for (int i = 0; i < 4; ++i) {
    clock_.Advance(absl::Seconds(5));  // past the grace, and past a full resync each time
    kubelet_->SyncOnce();
  }
  for (const char* name : {"first", "replacement"}) {
    SCOPED_TRACE(name);
    ASSERT_TRUE(Pod(name).has_value()) << "evicted";
    EXPECT_FALSE(kube::IsBeingDeleted(*Pod(name))) << "evicted";
    EXPECT_EQ(Phase(name), "Running");
    EXPECT_NE(Condition(name, "DisruptionTarget"), "True");
  }
  EXPECT_EQ(Condition("first", "DisruptionTarget", "reason"), "PreemptionCancelled");
  EXPECT_EQ(store_.Get("nodes", "", "node-a")->at("spec").at("taints").size(), 0u)
      << "tainted again";

  // A later preemption of the same node works as the first did.
  ASSERT_THAT(kubelet_->PreemptNode("node-a", absl::Seconds(10)), IsOk());
  EXPECT_EQ(store_.Get("nodes", "", "node-a")->at("spec").at("taints").size(), 1u);
  kubelet_->SyncOnce();
  EXPECT_EQ(Condition("replacement", "DisruptionTarget"), "True");
}

// Found by the operator's e2e test on a loaded machine: the kubelet's node cache had not yet
// seen the taint it had just added, took the untainted copy for a removal by hand and called
// the preemption off, so the preempted task was never moved.
TEST_F(KubeletTest, PreemptionTaint_NotYetInALaggingCache_IsNotARemovalByHand) {
  LaggingNodeAccess lagging(access_);
  Make({NodeConfig{"node-a", 4, {}, {}, true}}, &lagging);
  Create(ShellPod("first", "ignored", "Always"));
  kubelet_->SyncOnce();
  lagging.Freeze("node-a");  // the cache stops at the untainted Node
  ASSERT_THAT(kubelet_->PreemptNode("node-a", absl::Seconds(10)), IsOk());
  ASSERT_EQ(store_.Get("nodes", "", "node-a")->at("spec").at("taints").size(), 1u);
  for (int i = 0; i < 3; ++i) kubelet_->SyncOnce();
  EXPECT_EQ(Condition("first", "DisruptionTarget"), "True") << "called off";

  lagging.Thaw();  // caught up: the taint is there
  kubelet_->SyncOnce();
  clock_.Advance(absl::Seconds(10));
  kubelet_->SyncOnce();
  EXPECT_TRUE(!Pod("first").has_value() || kube::IsBeingDeleted(*Pod("first")))
      << "the grace ended: evicted";
  EXPECT_EQ(store_.Get("nodes", "", "node-a")->at("spec").at("taints").size(), 1u);
}

TEST_F(KubeletTest, SimulatedNode_RunningWithoutProcess_FailPodAndDeleteAtOnce) {
  Make({NodeConfig{"sim-0", 8, {}, {}, true}});
  Json pod = ShellPod("sim", "ignored", "Always");
  pod["spec"]["containers"][1]["name"] = Json::string("sidecar");
  Create(pod);
  Create(ShellPod("once", "ignored", "Never"));
  kubelet_->SyncOnce();
  EXPECT_EQ(Phase("sim"), "Running");
  EXPECT_EQ(Condition("sim", "Ready"), "True");
  EXPECT_EQ(Pod("sim")->at("status").at("containerStatuses").size(), 2u);
  EXPECT_FALSE(kubelet_->PodPid("ns", "sim").has_value());
  EXPECT_THAT(kubelet_->KillPod("ns", "sim"), StatusIs(absl::StatusCode::kFailedPrecondition));

  ASSERT_THAT(kubelet_->FailPod("ns", "once", 7), IsOk());
  ASSERT_THAT(kubelet_->FailPod("ns", "sim", 1), IsOk());
  kubelet_->SyncOnce();
  EXPECT_EQ(Phase("once"), "Failed");
  EXPECT_EQ(Container("once").at("state").at("terminated").at("exitCode").as_integer(), 7);
  EXPECT_EQ(StringAt(Container("sim"), "state.waiting.reason"), "CrashLoopBackOff");
  EXPECT_THAT(kubelet_->FailPod("ns", "sim", 1), StatusIs(absl::StatusCode::kFailedPrecondition));
  clock_.Advance(absl::Seconds(1));
  kubelet_->SyncOnce();
  EXPECT_EQ(Condition("sim", "Ready"), "True");
  EXPECT_EQ(Container("sim").at("restartCount").as_integer(), 1);

  ASSERT_THAT(store_.Delete("pods", "ns", "sim"), IsOk());
  EXPECT_TRUE(Pod("sim").has_value()) << "bound and running: graceful";
  kubelet_->SyncOnce();
  EXPECT_FALSE(Pod("sim").has_value()) << "nothing to stop on a simulated node";
}

TEST_F(KubeletTest, SimulatedNodes_TwoThousandPods_AllReachRunning_ThenAllGo) {
  std::vector<NodeConfig> nodes;
  for (int i = 0; i < 4; ++i)
    nodes.push_back(NodeConfig{"sim-" + std::to_string(i), 8, {}, {}, true});
  Kubelet::Options options;
  options.nodes = std::move(nodes);
  kubelet_ = std::make_unique<Kubelet>(access_, clock_, options);
  ASSERT_THAT(kubelet_->Start(), IsOk());
  constexpr int kPods = 2000;
  for (int i = 0; i < kPods; ++i) Create(ShellPod("p-" + std::to_string(i), "ignored"));
  const auto running = *kube::ObjectFilter::Parse("", "status.phase=Running");
  auto count = [&](const kube::ObjectFilter& filter) {
    return store_.List("pods", "ns", filter, 0, "")->items.size();
  };
  EXPECT_TRUE(Eventually([&] { return count(running) == kPods; }, absl::Seconds(120)))
      << count(running) << " of " << kPods << " running";
  for (int i = 0; i < kPods; ++i) {
    ASSERT_THAT(store_.Delete("pods", "ns", "p-" + std::to_string(i)), IsOk());
  }
  EXPECT_TRUE(Eventually([&] { return count(kube::ObjectFilter{}) == 0; }, absl::Seconds(120)))
      << count(kube::ObjectFilter{}) << " left";
}

TEST_F(KubeletTest, Stop_KillsEveryProcessIncludingChildren_AndStartRunsTheLoop) {
  Kubelet::Options options;
  options.nodes = {NodeConfig{"node-a", 0, {}, {}, false}};
  options.log_dir = log_dir_;
  options.stop_grace = absl::Seconds(1);
  kubelet_ = std::make_unique<Kubelet>(access_, clock_, options);
  ASSERT_THAT(kubelet_->Start(), IsOk());
  EXPECT_THAT(kubelet_->Start(), StatusIs(absl::StatusCode::kFailedPrecondition));
  Create(ShellPod("a", "exec sleep 1000"));
  Create(ShellPod("deaf",
                  "trap '' TERM; sleep 1000 & echo $! > " + log_dir_ + "/child; echo ready; wait"));
  ASSERT_TRUE(Eventually(
      [&] { return Phase("a") == "Running" && Log("deaf").find("ready") != std::string::npos; },
      kWait));
  const pid_t a = *kubelet_->PodPid("ns", "a");
  const pid_t deaf = *kubelet_->PodPid("ns", "deaf");
  const pid_t child = std::stoi(ReadFile(log_dir_ + "/child"));
  kubelet_->Stop();
  EXPECT_TRUE(ProcessGone(a));
  EXPECT_TRUE(ProcessGone(deaf));
  EXPECT_TRUE(Eventually([&] { return ProcessGone(child) || ProcessState(child) == 'Z'; }, kWait))
      << "the pod's whole process group goes";
  kubelet_->Stop();  // idempotent
}

}  // namespace
}  // namespace phalanx::localcluster
