// The operator end to end on the local cluster: phalanx-localcluster, phalanx-operator,
// per-job phalanx-coordinator pods and phalanx-sample-worker tasks, all real processes.
// A 2-task TrainingJob runs; one task's process is killed; the operator replaces only that
// task with the next incarnation and the job still completes.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/kube/cluster_config.h"
#include "common/kube/object_meta.h"
#include "common/kube/rest_client.h"
#include "common/process/subprocess.h"
#include "common/testing/eventually.h"
#include "common/testing/http_get.h"
#include "node_agent/preemption/fake_metadata_server.h"
#include "operator/api/yaml_json.h"
#include "operator/controller/reconciler.h"

namespace phalanx {
namespace {

// Creates a job and, when the API server refuses it, says why.
#define ASSERT_OK_JOB(create)                     \
  do {                                            \
    const absl::Status created_job = (create);    \
    ASSERT_TRUE(created_job.ok()) << created_job; \
  } while (false)

using ::phalanx::testing::Eventually;

const std::string kBuild = PHALANX_BUILD_DIR;
const std::string kSource = PHALANX_SOURCE_DIR;

class OperatorE2eTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / absl::StrCat("phalanx-op-e2e-", getpid());
    std::filesystem::create_directories(dir_);
    const std::string kubeconfig = (dir_ / "kubeconfig").string();
    kubeconfig_ = kubeconfig;
    cluster_ =
        Start({kBuild + "/tests/localcluster/phalanx-localcluster", "--kubeconfig-out", kubeconfig,
               "--work-dir", (dir_ / "cluster").string(), "--nodes", absl::StrCat(nodes_),
               "--gpus-per-node", absl::StrCat(gpus_per_node_)},
              "localcluster", [](const std::string& l) { return absl::StartsWith(l, "ready "); });
    ASSERT_NE(cluster_, nullptr);
    // "ready <url> backend=real|builtin": the test log says which control plane ran.
    for (const std::string& line : cluster_->Lines()) {
      if (absl::StartsWith(line, "ready ")) {
        backend_ = line.substr(line.rfind("backend=") + 8);
        std::cerr << "local cluster: " << line << "\n";
        RecordProperty("backend", backend_);
      }
    }
    absl::StatusOr<kube::ClusterConfig> config = kube::LoadKubeconfig(kubeconfig);
    ASSERT_TRUE(config.ok()) << config.status();
    client_ = *kube::RestClient::Create(*config);

    std::stringstream crd;
    crd << std::ifstream(kSource + "/crds/trainingjobs.phalanx.dev.yaml").rdbuf();
    absl::StatusOr<kube::Json> crd_json = op::YamlToJson(crd.str());
    ASSERT_TRUE(crd_json.ok()) << crd_json.status();
    const kube::Resource crds{"apiextensions.k8s.io", "v1", "customresourcedefinitions", false};
    absl::StatusOr<kube::Json> created = client_->Create(crds, "", *crd_json);
    ASSERT_TRUE(created.ok()) << created.status();
    // A real API server serves a new CRD's resource only once it is Established.
    ASSERT_TRUE(Eventually(
        [&] {
          absl::StatusOr<kube::Json> crd = client_->Get(crds, "", "trainingjobs.phalanx.dev");
          if (!crd.ok()) return false;
          for (const kube::Json& c :
               kube::ArrayOrEmpty(kube::FieldOrNull(*crd, "status"), "conditions").as_array()) {
            if (kube::StringAt(c, "type") == "Established" &&
                kube::StringAt(c, "status") == "True") {
              return true;
            }
          }
          return false;
        },
        absl::Seconds(30)));

    // Coordinators share the machine's one network namespace: give each job its own port.
    std::mt19937 rng(static_cast<unsigned>(getpid()));
    // Below Linux's ephemeral range (32768-60999): the real control plane's many client
    // connections take ephemeral ports, and a coordinator port among them may already be bound.
    port_base_ = 20000 + static_cast<int>(rng() % 5000) * 2;
    operator_ = StartOperator();
    ASSERT_NE(operator_, nullptr);
  }

  void TearDown() override {
    for (auto* p : {&operator_, &cluster_}) {
      if (*p) {
        (*p)->Signal(SIGTERM);
        (*p)->Wait(absl::Seconds(30));
      }
    }
    if (!HasFailure()) std::filesystem::remove_all(dir_);
  }

  std::unique_ptr<process::Subprocess> Start(std::vector<std::string> argv, const std::string& name,
                                             std::function<bool(const std::string&)> ready) {
    process::SubprocessOptions options;
    options.argv = std::move(argv);
    options.stderr_path = (dir_ / (name + ".log")).string();
    absl::StatusOr<std::unique_ptr<process::Subprocess>> p = process::Subprocess::Start(options);
    // A real control plane starts in ~7 s; a loaded machine can take many times that.
    if (!p.ok() || !(*p)->WaitForLine(ready, absl::Seconds(180))) return nullptr;
    return *std::move(p);
  }

  kube::Json Job() {
    absl::StatusOr<kube::Json> job = client_->Get(op::kTrainingJobs, "default", "train");
    return job.ok() ? *job : kube::Json::null();
  }

  struct JobOptions {
    int replicas = 2;
    int steps = 150;  // of 40 ms each
    std::string backoff = R"({"baseSeconds":1,"maxSeconds":2})";
    std::string coordination = "{}";
    std::string restart_scope = "Task";
    std::string preemption = "{}";
    int gpus = 0;  // nvidia.com/gpu each task asks for
  };

  // A job of sample workers, named "train".
  absl::Status CreateJob(const JobOptions& o) {
    const std::string worker = kBuild + "/examples/sample_worker/phalanx-sample-worker";
    const std::string resources =
        o.gpus > 0 ? absl::StrCat(R"(,"resources":{"limits":{"nvidia.com/gpu":)", o.gpus, "}}")
                   : "";
    kube::Json job = kube::Json::parse(absl::StrCat(
        R"({"apiVersion":"phalanx.dev/v1alpha1","kind":"TrainingJob","metadata":{"name":"train"},
            "spec":{"replicas":)",
        o.replicas, R"(,"failurePolicy":{"maxRestarts":3,"restartScope":")", o.restart_scope,
        R"(","backoff":)", o.backoff, R"(},
              "coordination":)",
        o.coordination, R"(,"preemption":)", o.preemption, R"(,
              "template":{"spec":{"terminationGracePeriodSeconds":1,"containers":[{"name":"worker","image":"sample","command":[")",
        worker, R"("],"args":["--steps=)", o.steps,
        R"(","--step_time=40ms","--checkpoint_every=10","--checkpoint_dir=)",
        (dir_ / "ckpt").string(), R"("])", resources, R"(}]}}}})"));
    return client_->Create(op::kTrainingJobs, "default", job).status();
  }

  // A 2-task job of sample workers training `steps` steps of 40 ms.
  absl::Status CreateJob(int steps,
                         const std::string& backoff = R"({"baseSeconds":1,"maxSeconds":2})",
                         const std::string& coordination = "{}") {
    return CreateJob(JobOptions{.steps = steps, .backoff = backoff, .coordination = coordination});
  }

  bool PodExists(const std::string& name) { return client_->Get(op::kPods, "default", name).ok(); }

  // The EVENT lines every pod of the job printed (the kubelet keeps each pod's log file, also
  // after the pod is deleted), pod by pod.
  std::map<std::string, std::vector<std::string>> WorkerEvents(const std::string& kind) {
    std::map<std::string, std::vector<std::string>> events;
    for (const auto& entry : std::filesystem::directory_iterator(dir_ / "cluster" / "logs")) {
      const std::string pod = entry.path().stem().string();
      std::ifstream in(entry.path());
      std::string line;
      while (std::getline(in, line)) {
        if (absl::StrContains(line, " kind=" + kind)) events[pod].push_back(line);
      }
    }
    return events;
  }

  // The value of `field=` in an EVENT line ("" when absent).
  static std::string EventField(const std::string& line, const std::string& field) {
    const size_t at = line.find(" " + field + "=");
    if (at == std::string::npos) return "";
    const size_t start = at + field.size() + 2;
    return line.substr(start, line.find(' ', start) - start);
  }

  std::unique_ptr<process::Subprocess> StartOperator(int port_span = 2000) {
    return Start({kBuild + "/operator/phalanx-operator", "--kubeconfig", kubeconfig_,
                  "--coordinator_command", kBuild + "/runtime/coordination/phalanx-coordinator",
                  "--coordinator_address", "pod-ip", "--coordinator_port_base",
                  absl::StrCat(port_base_), "--coordinator_port_span", absl::StrCat(port_span),
                  "--metrics_listen", "127.0.0.1:0", "--lease_namespace", "default"},
                 "operator", [](const std::string& l) { return absl::StartsWith(l, "ready "); });
  }

  int TaskPodCount() {
    absl::StatusOr<kube::ObjectList> pods =
        client_->List(op::kPods, "default", {.label_selector = "phalanx.dev/role=task"});
    return pods.ok() ? static_cast<int>(pods->items.size()) : -1;
  }

  int nodes_ = 2;
  int gpus_per_node_ = 0;
  std::string backend_;  // "real" or "builtin", from the local cluster's ready line
  std::string kubeconfig_;
  int port_base_ = 0;
  std::filesystem::path dir_;
  std::unique_ptr<process::Subprocess> cluster_;
  std::unique_ptr<process::Subprocess> operator_;
  std::unique_ptr<kube::RestClient> client_;
};

TEST_F(OperatorE2eTest, KilledTaskIsReplacedAloneAndTheJobCompletes) {
  ASSERT_OK_JOB(CreateJob(150));

  ASSERT_TRUE(Eventually([&] { return kube::StringAt(Job(), "status.phase") == "Running"; },
                         absl::Seconds(90)))
      << Job().serialize();
  // Task 1's process dies (as from an OOM kill or a crash).
  ASSERT_TRUE(client_->Raw("POST", "/admin/pods/default/train-task-1-0/kill").ok());

  ASSERT_TRUE(Eventually([&] { return client_->Get(op::kPods, "default", "train-task-1-1").ok(); },
                         absl::Seconds(60)))
      << Job().serialize();
  // Task 0 was never touched.
  EXPECT_TRUE(client_->Get(op::kPods, "default", "train-task-0-0").ok());
  EXPECT_FALSE(client_->Get(op::kPods, "default", "train-task-0-1").ok());

  ASSERT_TRUE(Eventually([&] { return kube::StringAt(Job(), "status.phase") == "Succeeded"; },
                         absl::Seconds(120)))
      << Job().serialize();
  const kube::Json final_job = Job();
  EXPECT_EQ(final_job.at("status").at("restarts").as_integer(), 1) << final_job.serialize();
  EXPECT_EQ(final_job.at("status").at("tasks").at(1).at("incarnation").as_integer(), 1);
  EXPECT_EQ(final_job.at("status").at("tasks").at(0).at("incarnation").as_integer(), 0);

  absl::StatusOr<kube::ObjectList> events = client_->List(
      {"", "v1", "events", true}, "default", {.field_selector = "involvedObject.name=train"});
  ASSERT_TRUE(events.ok());
  bool restarted_event = false;
  for (const kube::Json& e : events->items) {
    if (kube::StringAt(e, "reason") == "TaskRestarted") restarted_event = true;
  }
  EXPECT_TRUE(restarted_event);
}

TEST_F(OperatorE2eTest, OperatorServesHealthReadinessAndItsMetrics) {
  ASSERT_OK_JOB(CreateJob(20));
  ASSERT_TRUE(Eventually([&] { return kube::StringAt(Job(), "status.phase") == "Succeeded"; },
                         absl::Seconds(90)));
  int port = 0;
  for (const std::string& line : operator_->Lines()) {
    const size_t at = line.find("ready metrics=127.0.0.1:");
    if (at != std::string::npos) port = std::stoi(line.substr(at + 24));
  }
  ASSERT_GT(port, 0);
  for (const char* path : {"/healthz", "/readyz"}) {
    auto reply = phalanx::testing::HttpGet(port, path);
    ASSERT_TRUE(reply.has_value()) << path;
    EXPECT_EQ(reply->code, 200) << path << ": " << reply->body;
  }
  auto metrics = phalanx::testing::HttpGet(port, "/metrics");
  ASSERT_TRUE(metrics.has_value());
  for (const char* family :
       {"phalanx_operator_reconciles_total", "phalanx_operator_api_requests_total",
        "phalanx_operator_reconcile_duration_seconds", "phalanx_operator_queue_depth",
        "phalanx_operator_productive_seconds_total"}) {
    EXPECT_THAT(metrics->body, ::testing::HasSubstr(family));
  }
}

TEST_F(OperatorE2eTest, CoordinatorPodKilledIsRecreatedAndTheJobContinues) {
  ASSERT_OK_JOB(CreateJob(150));
  ASSERT_TRUE(Eventually([&] { return kube::StringAt(Job(), "status.phase") == "Running"; },
                         absl::Seconds(90)));
  absl::StatusOr<kube::Json> before = client_->Get(op::kPods, "default", "train-coordinator");
  ASSERT_TRUE(before.ok());
  ASSERT_TRUE(client_->Raw("POST", "/admin/pods/default/train-coordinator/kill").ok());
  // A new coordinator pod (new uid) under the same name; the tasks reconnect and finish.
  ASSERT_TRUE(Eventually(
      [&] {
        absl::StatusOr<kube::Json> now = client_->Get(op::kPods, "default", "train-coordinator");
        return now.ok() && kube::MetaString(*now, "uid") != kube::MetaString(*before, "uid") &&
               kube::StringAt(*now, "status.phase") == "Running";
      },
      absl::Seconds(60)));
  ASSERT_TRUE(Eventually([&] { return kube::StringAt(Job(), "status.phase") == "Succeeded"; },
                         absl::Seconds(120)))
      << Job().serialize();
}

// Issue 16 item 5: on the local cluster every coordinator listens in the machine's one network
// namespace. With only two port slots for two jobs, the UIDs' hash alone gives both the same
// port half of the time (the second coordinator then exits 2 at start, over and over); now each
// coordinator gets a slot no other holds, and both jobs finish with no coordinator restart.
TEST_F(OperatorE2eTest, TwoJobsInTwoCoordinatorPortSlotsBothRunWithoutACoordinatorRestart) {
  operator_->Signal(SIGTERM);
  operator_->Wait(absl::Seconds(30));
  operator_ = StartOperator(/*port_span=*/4);
  ASSERT_NE(operator_, nullptr);
  ASSERT_OK_JOB(CreateJob(150));
  kube::Json other = Job();
  other["metadata"] = kube::Json::parse(R"({"name":"other"})");
  if (other.has_field("status")) other.as_object().erase("status");
  kube::Json& args = other["spec"]["template"]["spec"]["containers"][0]["args"];
  args[args.size() - 1] = kube::Json::string("--checkpoint_dir=" + (dir_ / "ckpt-other").string());
  ASSERT_TRUE(client_->Create(op::kTrainingJobs, "default", other).ok());
  auto phase = [&](const std::string& job) {
    absl::StatusOr<kube::Json> j = client_->Get(op::kTrainingJobs, "default", job);
    return j.ok() ? kube::StringAt(*j, "status.phase") : "";
  };
  ASSERT_TRUE(
      Eventually([&] { return phase("train") == "Succeeded" && phase("other") == "Succeeded"; },
                 absl::Seconds(150)))
      << phase("train") << " " << phase("other");
  for (const std::string job : {"train", "other"}) {
    absl::StatusOr<kube::Json> j = client_->Get(op::kTrainingJobs, "default", job);
    ASSERT_TRUE(j.ok());
    EXPECT_FALSE(
        kube::FieldOrNull(kube::FieldOrNull(*j, "status"), "coordinator").has_field("restarts"))
        << job << " " << j->serialize();
  }
}

TEST_F(OperatorE2eTest, OperatorRestartedMidJobCreatesNoDuplicates) {
  ASSERT_OK_JOB(CreateJob(150));
  ASSERT_TRUE(Eventually([&] { return kube::StringAt(Job(), "status.phase") == "Running"; },
                         absl::Seconds(90)));
  operator_->Signal(SIGKILL);  // no lease release: the successor waits out the lease
  operator_->Wait(absl::Seconds(10));
  operator_ = StartOperator();
  ASSERT_NE(operator_, nullptr);
  ASSERT_TRUE(Eventually([&] { return kube::StringAt(Job(), "status.phase") == "Succeeded"; },
                         absl::Seconds(120)))
      << Job().serialize();
  EXPECT_EQ(Job().at("status").at("restarts").as_integer(), 0);
  EXPECT_EQ(TaskPodCount(), 2);  // the two original pods, no duplicates
}

TEST_F(OperatorE2eTest, SpecTheSchemaCannotCatchGetsAnInvalidSpecCondition) {
  // base > max is a CEL rule: a real API server refuses it at create time with the rule's
  // message; the built-in back end runs no CEL, so there the operator's own validation must
  // catch it and say so on the job.
  const absl::Status created_job = CreateJob(10, R"({"baseSeconds":100,"maxSeconds":10})");
  if (backend_ == "real") {
    EXPECT_TRUE(absl::IsInvalidArgument(created_job)) << created_job;
    EXPECT_THAT(std::string(created_job.message()),
                ::testing::HasSubstr("baseSeconds must not exceed maxSeconds"));
    return;
  }
  ASSERT_TRUE(created_job.ok()) << created_job;
  ASSERT_TRUE(Eventually(
      [&] {
        const kube::Json job = Job();  // owned here: the loop below reads into it
        for (const kube::Json& c :
             kube::ArrayOrEmpty(kube::FieldOrNull(job, "status"), "conditions").as_array()) {
          if (kube::StringAt(c, "type") == "InvalidSpec" && kube::StringAt(c, "status") == "True") {
            return absl::StrContains(kube::StringAt(c, "message"), "backoff");
          }
        }
        return false;
      },
      absl::Seconds(60)))
      << Job().serialize();
  EXPECT_EQ(TaskPodCount(), 0);
}

TEST_F(OperatorE2eTest, TaskPodsRefusedByPodSecurityBlockTheJobUntilTheNamespaceAllowsThem) {
  if (backend_ != "real") {
    GTEST_SKIP() << "PodSecurity admission runs only on the real control plane (the built-in API "
                    "server has none; see tests/localcluster/README.md)";
  }
  const kube::Resource namespaces{"", "v1", "namespaces", false};
  auto enforce = [&](const std::string& level) {
    return client_->Patch(
        namespaces, "", "default", kube::PatchType::kMerge,
        kube::Json::parse(absl::StrCat(
            R"({"metadata":{"labels":{"pod-security.kubernetes.io/enforce":")", level, R"("}}})")),
        {});
  };
  ASSERT_TRUE(enforce("restricted").ok());
  // The sample worker's template sets no securityContext: restricted refuses its pods.
  ASSERT_OK_JOB(CreateJob(20));
  auto children_ready = [&](const std::string& field) {
    const kube::Json job = Job();
    for (const kube::Json& c :
         kube::ArrayOrEmpty(kube::FieldOrNull(job, "status"), "conditions").as_array()) {
      if (kube::StringAt(c, "type") == "ChildrenReady") return kube::StringAt(c, field);
    }
    return std::string();
  };
  ASSERT_TRUE(Eventually(
      [&] {
        return kube::StringAt(Job(), "status.phase") == "Blocked" &&
               children_ready("reason") == "FailedCreate";
      },
      absl::Seconds(60)))
      << Job().serialize();
  EXPECT_THAT(children_ready("message"), ::testing::HasSubstr("violates PodSecurity"));
  // The coordinator pod Phalanx makes itself passes restricted.
  EXPECT_TRUE(client_->Get(op::kPods, "default", "train-coordinator").ok());
  absl::StatusOr<kube::ObjectList> events = client_->List(
      {"", "v1", "events", true}, "default", {.field_selector = "involvedObject.name=train"});
  ASSERT_TRUE(events.ok());
  bool failed_create = false;
  for (const kube::Json& e : events->items) {
    failed_create |= kube::StringAt(e, "reason") == "FailedCreate" &&
                     absl::StrContains(kube::StringAt(e, "message"), "PodSecurity");
  }
  EXPECT_TRUE(failed_create) << "a FailedCreate Event quoting the API server";

  // The namespace allows the pods now: the job leaves Blocked by itself and finishes.
  ASSERT_TRUE(enforce("baseline").ok());
  ASSERT_TRUE(Eventually([&] { return kube::StringAt(Job(), "status.phase") == "Succeeded"; },
                         absl::Seconds(120)))
      << Job().serialize();
  EXPECT_EQ(children_ready("status"), "True");
}

TEST_F(OperatorE2eTest, HungTaskDeclaredFailedByTheCoordinatorIsRestartedWhileItsPodLooksRunning) {
  ASSERT_TRUE(CreateJob(200, R"({"baseSeconds":1,"maxSeconds":2})",
                        R"({"heartbeatIntervalSeconds":1,"heartbeatTimeoutSeconds":2})")
                  .ok());
  ASSERT_TRUE(Eventually([&] { return kube::StringAt(Job(), "status.phase") == "Running"; },
                         absl::Seconds(90)));
  // Once task 0 has registered with the coordinator (its log says so)...
  ASSERT_TRUE(Eventually(
      [&] {
        absl::StatusOr<std::string> log =
            client_->Raw("GET", "/api/v1/namespaces/default/pods/train-task-0-0/log");
        return log.ok() && absl::StrContains(*log, "kind=connected");
      },
      absl::Seconds(60)));
  // ...SIGSTOP it: the process hangs and its pod stays Running; only the coordinator's
  // heartbeats notice.
  ASSERT_TRUE(client_->Raw("POST", "/admin/pods/default/train-task-0-0/stop").ok());
  ASSERT_TRUE(Eventually([&] { return client_->Get(op::kPods, "default", "train-task-0-1").ok(); },
                         absl::Seconds(60)))
      << Job().serialize();
  ASSERT_TRUE(Eventually([&] { return kube::StringAt(Job(), "status.phase") == "Succeeded"; },
                         absl::Seconds(120)))
      << Job().serialize();
  EXPECT_EQ(Job().at("status").at("tasks").at(0).at("incarnation").as_integer(), 1);
  EXPECT_EQ(Job().at("status").at("tasks").at(1).at("incarnation").as_integer(), 0);
  EXPECT_EQ(Job().at("status").at("tasks").at(0).at("lastFailureReason").as_string(),
            "CoordinatorDeclaredFailed");
}

TEST_F(OperatorE2eTest, SuspendDeletesThePodsAndResumeFinishesTheJob) {
  ASSERT_OK_JOB(CreateJob(150));
  ASSERT_TRUE(Eventually([&] { return kube::StringAt(Job(), "status.phase") == "Running"; },
                         absl::Seconds(90)));
  auto suspend = [&](bool on) {
    return client_
        ->Patch(op::kTrainingJobs, "default", "train", kube::PatchType::kMerge,
                kube::Json::parse(on ? R"({"spec":{"suspend":true}})"
                                     : R"({"spec":{"suspend":false}})"),
                {})
        .ok();
  };
  ASSERT_TRUE(suspend(true));
  ASSERT_TRUE(Eventually(
      [&] { return kube::StringAt(Job(), "status.phase") == "Suspended" && TaskPodCount() == 0; },
      absl::Seconds(60)))
      << Job().serialize();
  ASSERT_TRUE(suspend(false));
  ASSERT_TRUE(Eventually([&] { return kube::StringAt(Job(), "status.phase") == "Succeeded"; },
                         absl::Seconds(120)))
      << Job().serialize();
  EXPECT_EQ(Job().at("status").at("restarts").as_integer(), 0);
}

TEST_F(OperatorE2eTest, ATaskThatKeepsFailingExhaustsMaxRestartsAndFailsTheJob) {
  kube::Json job = kube::Json::parse(
      R"({"apiVersion":"phalanx.dev/v1alpha1","kind":"TrainingJob","metadata":{"name":"train"},
          "spec":{"replicas":1,"failurePolicy":{"maxRestarts":2,"backoff":{"baseSeconds":1,"maxSeconds":1}},
            "template":{"spec":{"containers":[{"name":"w","image":"x",
              "command":["/bin/sh","-c","exit 7"]}]}}}})");
  ASSERT_TRUE(client_->Create(op::kTrainingJobs, "default", job).ok());
  ASSERT_TRUE(Eventually([&] { return kube::StringAt(Job(), "status.phase") == "Failed"; },
                         absl::Seconds(90)))
      << Job().serialize();
  const kube::Json failed = Job();
  EXPECT_EQ(failed.at("status").at("restarts").as_integer(), 2);
  EXPECT_EQ(failed.at("status").at("tasks").at(0).at("lastExitCode").as_integer(), 7);
  bool condition = false;
  for (const kube::Json& c :
       kube::ArrayOrEmpty(kube::FieldOrNull(failed, "status"), "conditions").as_array()) {
    if (kube::StringAt(c, "type") == "Failed" &&
        kube::StringAt(c, "reason") == "MaxRestartsExceeded") {
      condition = true;
    }
  }
  EXPECT_TRUE(condition) << failed.serialize();
}

TEST_F(OperatorE2eTest, JobRestartScopeReplacesEveryTaskWhenOneFails) {
  ASSERT_OK_JOB(CreateJob(JobOptions{.steps = 150, .restart_scope = "Job"}));
  ASSERT_TRUE(Eventually([&] { return kube::StringAt(Job(), "status.phase") == "Running"; },
                         absl::Seconds(90)));
  absl::StatusOr<kube::Json> survivor = client_->Get(op::kPods, "default", "train-task-0-0");
  ASSERT_TRUE(survivor.ok());
  ASSERT_TRUE(client_->Raw("POST", "/admin/pods/default/train-task-1-0/kill").ok());
  // Both tasks come back as incarnation 1: the healthy one is replaced too.
  ASSERT_TRUE(Eventually([&] { return PodExists("train-task-0-1") && PodExists("train-task-1-1"); },
                         absl::Seconds(60)))
      << Job().serialize();
  ASSERT_TRUE(Eventually([&] { return kube::StringAt(Job(), "status.phase") == "Succeeded"; },
                         absl::Seconds(120)))
      << Job().serialize();
  const kube::Json done = Job();
  EXPECT_EQ(done.at("status").at("restarts").as_integer(), 1) << done.serialize();
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(done.at("status").at("tasks").at(i).at("incarnation").as_integer(), 1);
  }
  EXPECT_EQ(done.at("status").at("tasks").at(0).at("lastFailureReason").as_string(), "JobRestart");
  EXPECT_FALSE(PodExists("train-task-0-0"));
}

TEST_F(OperatorE2eTest, ApiServerFaultsDuringARestartStillConverge) {
  ASSERT_OK_JOB(CreateJob(200));
  ASSERT_TRUE(Eventually([&] { return kube::StringAt(Job(), "status.phase") == "Running"; },
                         absl::Seconds(90)));
  // A third of the API requests fail with 500 and every watch is cut while a task dies...
  ASSERT_TRUE(client_->Raw("POST", "/admin/errors?share=0.3&code=500").ok());
  ASSERT_TRUE(client_->Raw("POST", "/admin/watches/drop").ok());
  ASSERT_TRUE(client_->Raw("POST", "/admin/pods/default/train-task-1-0/kill").ok());
  ASSERT_TRUE(client_->Raw("POST", "/admin/watches/drop").ok());
  ASSERT_TRUE(Eventually([&] { return PodExists("train-task-1-1"); }, absl::Seconds(60)))
      << Job().serialize();
  // ...then the server throttles half the requests (429) while the other task dies.
  ASSERT_TRUE(client_->Raw("POST", "/admin/errors?share=0.5&code=429").ok());
  ASSERT_TRUE(client_->Raw("POST", "/admin/watches/drop").ok());
  ASSERT_TRUE(client_->Raw("POST", "/admin/pods/default/train-task-0-0/kill").ok());
  ASSERT_TRUE(Eventually([&] { return PodExists("train-task-0-1"); }, absl::Seconds(60)))
      << Job().serialize();
  ASSERT_TRUE(client_->Raw("POST", "/admin/errors?share=0").ok());
  ASSERT_TRUE(Eventually([&] { return kube::StringAt(Job(), "status.phase") == "Succeeded"; },
                         absl::Seconds(120)))
      << Job().serialize();
  const kube::Json done = Job();
  EXPECT_EQ(done.at("status").at("restarts").as_integer(), 2) << done.serialize();
  EXPECT_EQ(TaskPodCount(), 2);  // train-task-0-1 and train-task-1-1: nothing duplicated
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(done.at("status").at("tasks").at(i).at("incarnation").as_integer(), 1);
  }
}

// Three nodes with 2 GPUs each; every task asks for 2, so each task has a node of its own.
class OperatorPreemptionE2eTest : public OperatorE2eTest {
 protected:
  OperatorPreemptionE2eTest() {
    nodes_ = 3;
    gpus_per_node_ = 2;
  }

  // A 2-task job (2 GPUs each), Running, both tasks past their first periodic checkpoint.
  void StartTrainingJob(int checkpoint_grace_seconds = 20) {
    ASSERT_TRUE(CreateJob(JobOptions{.steps = 250,
                                     .preemption = absl::StrCat(R"({"checkpointGraceSeconds":)",
                                                                checkpoint_grace_seconds, "}"),
                                     .gpus = 2})
                    .ok());
    ASSERT_TRUE(Eventually([&] { return kube::StringAt(Job(), "status.phase") == "Running"; },
                           absl::Seconds(90)));
    ASSERT_TRUE(
        Eventually([&] { return WorkerEvents("checkpoint").size() == 2; }, absl::Seconds(60)));
  }

  // A first-incarnation task pod whose node does not also hold the coordinator, and that node.
  void PickVictim(std::string& victim_pod, std::string& node) {
    absl::StatusOr<kube::Json> coordinator =
        client_->Get(op::kPods, "default", "train-coordinator");
    ASSERT_TRUE(coordinator.ok());
    for (int i = 0; i < 2 && node.empty(); ++i) {
      absl::StatusOr<kube::Json> pod =
          client_->Get(op::kPods, "default", absl::StrCat("train-task-", i, "-0"));
      ASSERT_TRUE(pod.ok());
      if (kube::StringAt(*pod, "spec.nodeName") != kube::StringAt(*coordinator, "spec.nodeName")) {
        victim_pod = kube::MetaString(*pod, "name");
        node = kube::StringAt(*pod, "spec.nodeName");
      }
    }
    ASSERT_FALSE(node.empty());
  }

  // After the job succeeded: a preemption and no restart were counted, every first-incarnation
  // task checkpointed at one sync step, `victim_pod` left at that step, no recovery lost a
  // step. Returns the sync step.
  std::string ExpectOneSyncStepAndNoStepLost(const std::string& victim_pod) {
    const kube::Json done = Job();
    EXPECT_GE(done.at("status").at("preemptions").as_integer(), 1) << done.serialize();
    EXPECT_EQ(done.at("status").at("restarts").as_integer(), 0) << done.serialize();
    std::set<std::string> sync_steps;
    const auto sync = WorkerEvents("sync_checkpoint");
    for (int i = 0; i < 2; ++i) {
      const auto it = sync.find(absl::StrCat("default_train-task-", i, "-0"));
      EXPECT_NE(it, sync.end()) << "task " << i << " never checkpointed at the sync step";
      if (it == sync.end()) continue;
      for (const std::string& line : it->second) sync_steps.insert(EventField(line, "step"));
    }
    EXPECT_EQ(sync_steps.size(), 1u);
    if (sync_steps.empty()) return "";
    const auto left = WorkerEvents("left_for_preemption");
    EXPECT_TRUE(left.contains("default_" + victim_pod)) << victim_pod << " was evicted first";
    if (left.contains("default_" + victim_pod)) {
      EXPECT_EQ(EventField(left.at("default_" + victim_pod).front(), "step"), *sync_steps.begin());
    }
    for (const auto& [pod, lines] : WorkerEvents("recovered")) {
      for (const std::string& line : lines) EXPECT_EQ(EventField(line, "lost"), "0") << line;
    }
    return *sync_steps.begin();
  }
};

TEST_F(OperatorPreemptionE2eTest, NodePreemptionCheckpointsEveryTaskAtOneStepAndLosesNoSteps) {
  StartTrainingJob();
  if (HasFatalFailure()) return;
  std::string victim_pod, node;
  PickVictim(victim_pod, node);
  if (HasFatalFailure()) return;
  // The cloud's notice: taint now, evict after 15 s.
  ASSERT_TRUE(
      client_->Raw("POST", absl::StrCat("/admin/nodes/", node, "/preempt?graceSeconds=15")).ok());
  ASSERT_TRUE(Eventually([&] { return kube::StringAt(Job(), "status.phase") == "Succeeded"; },
                         absl::Seconds(150)))
      << Job().serialize();
  const std::string sync_step = ExpectOneSyncStepAndNoStepLost(victim_pod);
  // The replacement resumed from the agreed step, and all tasks end in one state.
  for (const auto& [pod, lines] : WorkerEvents("start")) {
    if (absl::EndsWith(pod, "-0")) continue;  // the first incarnation started at step 0
    for (const std::string& line : lines) EXPECT_EQ(EventField(line, "resume_step"), sync_step);
  }
  std::set<std::string> final_states;
  for (const auto& [pod, lines] : WorkerEvents("done")) {
    for (const std::string& line : lines) final_states.insert(EventField(line, "state"));
  }
  EXPECT_EQ(final_states.size(), 1u);
}

// Issue 16 item 3: the coordinator is killed right after the operator opened a preemption round
// on it. Its replacement gets the round too (the operator re-sends every open notice to a new
// coordinator pod), the tasks checkpoint at an agreed step before the victim moves, and no step
// is lost.
TEST_F(OperatorPreemptionE2eTest, CoordinatorKilledRightAfterARoundOpenedStillGetsTheRound) {
  // 60 s of training, so the job is still running when the round is re-sent.
  ASSERT_TRUE(
      CreateJob(
          JobOptions{.steps = 1500, .preemption = R"({"checkpointGraceSeconds":60})", .gpus = 2})
          .ok());
  ASSERT_TRUE(Eventually([&] { return kube::StringAt(Job(), "status.phase") == "Running"; },
                         absl::Seconds(90)));
  ASSERT_TRUE(
      Eventually([&] { return WorkerEvents("checkpoint").size() == 2; }, absl::Seconds(60)));
  std::string victim_pod, node;
  PickVictim(victim_pod, node);
  if (HasFatalFailure()) return;
  const std::string other_pod =
      victim_pod == "train-task-0-0" ? "train-task-1-0" : "train-task-0-0";
  auto rounds_opened = [&] {
    absl::StatusOr<kube::ObjectList> events = client_->List(
        {"", "v1", "events", true}, "default", {.field_selector = "involvedObject.name=train"});
    int n = 0;
    if (events.ok()) {
      for (const kube::Json& e : events->items) {
        if (kube::StringAt(e, "reason") == "CheckpointRoundOpened") {
          n += std::max(1, static_cast<int>(kube::FieldOrNull(e, "count").is_integer()
                                                ? kube::FieldOrNull(e, "count").as_integer()
                                                : 1));
        }
      }
    }
    return n;
  };
  absl::StatusOr<kube::Json> before = client_->Get(op::kPods, "default", "train-coordinator");
  ASSERT_TRUE(before.ok());
  // The other task is frozen for a few seconds (well within its heartbeat timeout, 10 s), so
  // the round cannot reach its sync step before the coordinator dies.
  ASSERT_TRUE(client_->Raw("POST", "/admin/pods/default/" + other_pod + "/stop").ok());
  ASSERT_TRUE(
      client_->Raw("POST", absl::StrCat("/admin/nodes/", node, "/preempt?graceSeconds=60")).ok());
  ASSERT_TRUE(Eventually([&] { return rounds_opened() >= 1; }, absl::Seconds(30)));
  ASSERT_TRUE(client_->Raw("POST", "/admin/pods/default/train-coordinator/kill").ok());
  // A new coordinator pod, and the operator opens the round on it as well.
  const bool replaced = Eventually(
      [&] {
        absl::StatusOr<kube::Json> now = client_->Get(op::kPods, "default", "train-coordinator");
        return now.ok() && kube::MetaString(*now, "uid") != kube::MetaString(*before, "uid") &&
               kube::StringAt(*now, "status.phase") == "Running";
      },
      absl::Seconds(60));
  ASSERT_TRUE(client_->Raw("POST", "/admin/pods/default/" + other_pod + "/continue").ok());
  ASSERT_TRUE(replaced);
  if (!Eventually([&] { return rounds_opened() >= 2; }, absl::Seconds(60))) {
    std::ifstream log(dir_ / "operator.log");
    for (std::string line; std::getline(log, line);) std::cerr << "OPLOG " << line << "\n";
    absl::StatusOr<kube::ObjectList> events = client_->List(
        {"", "v1", "events", true}, "default", {.field_selector = "involvedObject.name=train"});
    for (const kube::Json& e : events->items) {
      std::cerr << "EVENT " << kube::StringAt(e, "reason") << " " << kube::StringAt(e, "message")
                << "\n";
    }
    std::cerr << "JOB " << Job().serialize() << "\n";
    FAIL() << "the new coordinator never got the open round";
  }
  ASSERT_TRUE(Eventually([&] { return kube::StringAt(Job(), "status.phase") == "Succeeded"; },
                         absl::Seconds(240)))
      << Job().serialize();
  const kube::Json done = Job();
  EXPECT_GE(done.at("status").at("preemptions").as_integer(), 1) << done.serialize();
  EXPECT_GE(done.at("status").at("coordinator").at("restarts").as_integer(), 1) << done.serialize();
  // The victim left at a step it checkpointed at (the round's agreed step), its replacement
  // resumed from that step, and no recovery lost a step.
  const auto sync = WorkerEvents("sync_checkpoint");
  const auto left = WorkerEvents("left_for_preemption");
  ASSERT_TRUE(left.contains("default_" + victim_pod)) << victim_pod << " never left at a step";
  const std::string left_at = EventField(left.at("default_" + victim_pod).front(), "step");
  ASSERT_TRUE(sync.contains("default_" + victim_pod));
  std::set<std::string> victim_sync;
  for (const std::string& line : sync.at("default_" + victim_pod)) {
    victim_sync.insert(EventField(line, "step"));
  }
  EXPECT_TRUE(victim_sync.contains(left_at)) << left_at;
  for (const auto& [pod, lines] : WorkerEvents("start")) {
    if (absl::EndsWith(pod, "-0")) continue;
    for (const std::string& line : lines) EXPECT_EQ(EventField(line, "resume_step"), left_at);
  }
  // The preemption lost no step: every recovery to the agreed step lost nothing. (The
  // coordinator's restart itself rolls the tasks back to their last periodic checkpoint, before
  // the round was agreed; that is the cost of a coordinator crash, not of the preemption.)
  int recoveries_at_sync = 0;
  for (const auto& [pod, lines] : WorkerEvents("recovered")) {
    for (const std::string& line : lines) {
      RecordProperty("recovered_" + pod, line);
      if (EventField(line, "resume_step") != left_at) continue;
      ++recoveries_at_sync;
      EXPECT_EQ(EventField(line, "lost"), "0") << line;
    }
  }
  EXPECT_GE(recoveries_at_sync, 1);
}

// The node agent end to end: one phalanx-agent per node (fake GPUs), each polling its own fake
// GCE metadata server. The victim node's server starts answering preempted=TRUE; its agent
// taints the node, the operator opens a preemption round, every task checkpoints at one step,
// the preempted task moves, and no step is lost.
class AgentPreemptionE2eTest : public OperatorPreemptionE2eTest {
 protected:
  std::unique_ptr<process::Subprocess> StartAgent(const std::string& node,
                                                  const std::string& metadata_url) {
    return Start({kBuild + "/node_agent/phalanx-agent", "--kubeconfig", kubeconfig_, "--node_name",
                  node, "--notice_sources", "gce,node-taint", "--gce_metadata_url", metadata_url,
                  "--fake_gpus", "2", "--poll_interval", "500ms", "--clique_socket",
                  (dir_ / (node + ".sock")).string(), "--metrics_listen", "127.0.0.1:0"},
                 "agent-" + node,
                 [](const std::string& l) { return absl::StartsWith(l, "ready "); });
  }
};

TEST_F(AgentPreemptionE2eTest, AGceNoticeOnOneNodeCheckpointsTheJobAtOneStepAndLosesNoSteps) {
  std::map<std::string, std::unique_ptr<agent::testing::FakeMetadataServer>> metadata;
  std::vector<std::unique_ptr<process::Subprocess>> agents;
  for (int n = 0; n < nodes_; ++n) {
    const std::string node = absl::StrCat("node-", n);
    auto server = agent::testing::FakeMetadataServer::Start();
    ASSERT_TRUE(server.ok()) << server.status();
    (*server)->Set("GET", "/computeMetadata/v1/instance/preempted",
                   agent::testing::ScriptedResponse::Ok("FALSE"));
    (*server)->Set("GET", "/computeMetadata/v1/instance/maintenance-event",
                   agent::testing::ScriptedResponse::Ok("NONE"));
    agents.push_back(StartAgent(node, (*server)->base_url()));
    ASSERT_NE(agents.back(), nullptr) << node;
    metadata[node] = *std::move(server);
  }
  // A grace longer than GCE's 30 s: the node's own deadline must win (issue 12).
  StartTrainingJob(/*checkpoint_grace_seconds=*/60);
  if (HasFatalFailure()) return;
  std::string victim_pod, node;
  PickVictim(victim_pod, node);
  if (HasFatalFailure()) return;
  // The cloud says: this VM is being preempted.
  metadata[node]->Set("GET", "/computeMetadata/v1/instance/preempted",
                      agent::testing::ScriptedResponse::Ok("TRUE"));
  ASSERT_TRUE(Eventually([&] { return kube::StringAt(Job(), "status.phase") == "Succeeded"; },
                         absl::Seconds(150)))
      << Job().serialize();

  ExpectOneSyncStepAndNoStepLost(victim_pod);
  // The node carries the agent's taint, condition and Event.
  absl::StatusOr<kube::Json> marked = client_->Get(op::kNodes, "", node);
  ASSERT_TRUE(marked.ok());
  EXPECT_THAT(marked->serialize(), ::testing::HasSubstr("phalanx.dev/preempting"));
  EXPECT_THAT(marked->serialize(), ::testing::HasSubstr("PhalanxPreemptionNotice"));
  absl::StatusOr<kube::ObjectList> events = client_->List(
      {"", "v1", "events", true}, "default", {.field_selector = "involvedObject.name=" + node});
  ASSERT_TRUE(events.ok());
  bool noticed = false;
  for (const kube::Json& e : events->items)
    noticed |= kube::StringAt(e, "reason") == "PreemptionNotice";
  EXPECT_TRUE(noticed);
  // The agent put GCE's deadline on the Node with its taint, and the round the operator opened
  // ends by it: at most 30 s after the operator saw the notice, not checkpointGraceSeconds (60).
  const kube::Json& deadline_annotation =
      kube::FieldOrNull(kube::FieldOrNull(kube::FieldOrNull(*marked, "metadata"), "annotations"),
                        "phalanx.dev/preemption-deadline");
  ASSERT_TRUE(deadline_annotation.is_string()) << marked->serialize();
  const std::optional<absl::Time> node_deadline =
      kube::ParseKubeTime(deadline_annotation.as_string());
  ASSERT_TRUE(node_deadline.has_value()) << deadline_annotation.serialize();
  absl::StatusOr<kube::ObjectList> job_events = client_->List(
      {"", "v1", "events", true}, "default", {.field_selector = "involvedObject.name=train"});
  ASSERT_TRUE(job_events.ok());
  std::vector<std::string> notices;
  for (const kube::Json& e : job_events->items) {
    if (kube::StringAt(e, "reason") == "PreemptionNotice")
      notices.push_back(kube::StringAt(e, "message"));
  }
  ASSERT_EQ(notices.size(), 1u) << ::testing::PrintToString(notices);
  // "... asking its coordinator for a coordinated checkpoint, deadline <RFC 3339> (in <d>)"
  const std::string& notice = notices.front();
  const size_t at = notice.find("deadline ");
  ASSERT_NE(at, std::string::npos) << notice;
  const std::string when = notice.substr(at + 9, notice.find(' ', at + 9) - at - 9);
  EXPECT_EQ(kube::ParseKubeTime(when), node_deadline) << notice;
  const size_t in = notice.find("(in ");
  ASSERT_NE(in, std::string::npos) << notice;
  absl::Duration round;
  ASSERT_TRUE(absl::ParseDuration(notice.substr(in + 4, notice.find(')', in) - in - 4), &round))
      << notice;
  EXPECT_LE(round, absl::Seconds(30)) << notice;
  EXPECT_GT(round, absl::ZeroDuration()) << notice;
  RecordProperty("round_deadline", notice);
  for (auto& a : agents) {
    a->Signal(SIGINT);
    a->Wait(absl::Seconds(10));
  }
}

}  // namespace
}  // namespace phalanx
