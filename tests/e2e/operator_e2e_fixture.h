// The fixture of the operator end-to-end tests: the local cluster (phalanx-localcluster), the
// operator, and helpers to create jobs and read what their workers reported. Shared by
// operator_e2e_test.cc (restarts, suspend, faults) and operator_preemption_e2e_test.cc.
//
// A real control plane costs ~7 CPU-seconds to start, about half of a case. So a case whose
// suite leaves the nodes and the API server alone (SharesTheCluster) runs on the cluster CTest
// started for the whole run (the fixture e2e_shared_cluster, tests/e2e/shared_cluster.sh; its
// folder in $PHALANX_E2E_SHARED_CLUSTER), in a namespace of its own with an operator that watches
// only it. Without that variable (the binary run by hand) every case starts its own cluster.
#pragma once

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/kube/cluster_config.h"
#include "common/kube/crd_established.h"
#include "common/kube/object_meta.h"
#include "common/kube/resources.h"
#include "common/kube/rest_client.h"
#include "common/process/subprocess.h"
#include "common/testing/eventually.h"
#include "common/testing/http_get.h"
#include "node_agent/preemption/fake_metadata_server.h"
#include "operator/api/yaml_json.h"
#include "operator/controller/reconciler.h"
#include "tests/e2e/shared_cluster.h"

namespace phalanx::e2e {

// Creates a job and, when the API server refuses it, says why.
#define ASSERT_OK_JOB(create)                     \
  do {                                            \
    const absl::Status created_job = (create);    \
    ASSERT_TRUE(created_job.ok()) << created_job; \
  } while (false)

using ::phalanx::testing::Eventually;

inline const std::string kBuild = PHALANX_BUILD_DIR;
inline const std::string kSource = PHALANX_SOURCE_DIR;

class OperatorE2eTest : public ::testing::Test {
 protected:
  // Whether this suite's cases may share a cluster: they change no Node and inject no API
  // server faults, and need the default two nodes and no GPUs (the shared nodes have two fake
  // GPUs each, which tasks that ask for none never see).
  virtual bool SharesTheCluster() const { return nodes_ == 2 && gpus_per_node_ == 0; }

  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / absl::StrCat("phalanx-op-e2e-", getpid());
    std::filesystem::create_directories(dir_);
    absl::StatusOr<std::optional<phalanx::testing::SharedCluster>> shared =
        phalanx::testing::SharedClusterFromEnv();
    ASSERT_TRUE(shared.ok()) << shared.status();
    if (shared->has_value() && SharesTheCluster()) {
      JoinSharedCluster(**shared);
    } else {
      ASSERT_NO_FATAL_FAILURE(StartOwnCluster());
    }
    absl::StatusOr<kube::ClusterConfig> config = kube::LoadKubeconfig(kubeconfig_);
    ASSERT_TRUE(config.ok()) << config.status();
    client_ = *kube::RestClient::Create(*config);
    if (ns_ != "default") {
      kube::Json ns = kube::Json::object();
      ns["metadata"]["name"] = kube::Json::string(ns_);
      absl::StatusOr<kube::Json> created = client_->Create(kube::kNamespaces, "", ns);
      ASSERT_TRUE(created.ok()) << created.status();
    }
    ASSERT_NO_FATAL_FAILURE(InstallCrd());

    // Coordinators share the machine's one network namespace: give each job its own port.
    std::mt19937 rng(static_cast<unsigned>(getpid()));
    // Below Linux's ephemeral range (32768-60999): the real control plane's many client
    // connections take ephemeral ports, and a coordinator port among them may already be bound.
    port_base_ = 20000 + static_cast<int>(rng() % 5000) * 2;
    operator_ = StartOperator();
    ASSERT_NE(operator_, nullptr);
  }

  // The cluster shared_cluster.sh started: its kubeconfig, its pod logs, its ready line.
  void JoinSharedCluster(const phalanx::testing::SharedCluster& shared) {
    kubeconfig_ = shared.kubeconfig;
    logs_dir_ = shared.logs_dir;
    backend_ = shared.backend;
    std::cerr << "shared local cluster: " << shared.ready_line << "\n";
    RecordProperty("backend", backend_);
    ns_ = absl::StrCat("e2e-", getpid());
  }

  void StartOwnCluster() {
    const std::string kubeconfig = (dir_ / "kubeconfig").string();
    kubeconfig_ = kubeconfig;
    logs_dir_ = dir_ / "cluster" / "logs";
    cluster_ =
        Start({kBuild + "/tests/localcluster/phalanx-localcluster", "--kubeconfig-out", kubeconfig,
               "--work-dir", (dir_ / "cluster").string(), "--nodes", absl::StrCat(nodes_),
               "--gpus-per-node", absl::StrCat(gpus_per_node_)},
              "localcluster", [](const std::string& l) { return absl::StartsWith(l, "ready "); });
    ASSERT_NE(cluster_, nullptr);
    // "ready <url> backend=real|builtin": the test log says which control plane ran.
    for (const std::string& line : cluster_->Lines()) {
      if (absl::StartsWith(line, "ready ")) {
        backend_ = phalanx::testing::ReadyLineField(line, "backend");
        std::cerr << "local cluster: " << line << "\n";
        RecordProperty("backend", backend_);
      }
    }
  }

  // The CRD, once per cluster (a shared one already has it: AlreadyExists is fine).
  void InstallCrd() {
    std::stringstream crd;
    crd << std::ifstream(kSource + "/crds/trainingjobs.phalanx.dev.yaml").rdbuf();
    absl::StatusOr<kube::Json> crd_json = op::YamlToJson(crd.str());
    ASSERT_TRUE(crd_json.ok()) << crd_json.status();
    const kube::Resource crds{"apiextensions.k8s.io", "v1", "customresourcedefinitions", false};
    absl::StatusOr<kube::Json> created = client_->Create(crds, "", *crd_json);
    ASSERT_TRUE(created.ok() || absl::IsAlreadyExists(created.status())) << created.status();
    // A real API server serves a new CRD's resource only once it is Established.
    absl::Status established =
        kube::WaitForCrdEstablished(*client_, "trainingjobs.phalanx.dev", absl::Seconds(30));
    ASSERT_TRUE(established.ok()) << established;
  }

  void TearDown() override {
    for (auto* p : {&operator_, &cluster_}) {
      if (*p) {
        (*p)->Signal(SIGTERM);
        (*p)->Wait(absl::Seconds(30));
      }
    }
    // On a shared cluster the namespace goes, and its pods with it (not waited for). A failed
    // case's is kept, with its pods' logs, for whoever reads the failure.
    if (client_ != nullptr && ns_ != "default" && !HasFailure()) {
      (void)client_->Delete(kube::kNamespaces, "", ns_, {});
      // Its workers write checkpoints under dir_ until their pods are gone: removing dir_
      // before then raced with them ("Directory not empty", or files left behind).
      const bool gone = phalanx::testing::Eventually(
          [&] {
            absl::StatusOr<kube::ObjectList> pods = client_->List(kube::kPods, ns_, {});
            return pods.ok() && pods->items.empty();
          },
          absl::Seconds(60));
      if (!gone) std::cerr << "namespace " << ns_ << " still has pods; " << dir_ << " is kept\n";
      if (!gone) return;
    }
    if (!HasFailure()) {
      std::error_code error;
      std::filesystem::remove_all(dir_, error);
      if (error) std::cerr << "could not remove " << dir_ << ": " << error.message() << "\n";
    }
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
    absl::StatusOr<kube::Json> job = client_->Get(op::kTrainingJobs, ns_, "train");
    return job.ok() ? *job : kube::Json::null();
  }

  struct JobOptions {
    int replicas = 2;
    int steps = 150;  // of 40 ms each
    std::string backoff = R"({"baseSeconds":1,"maxSeconds":2})";
    std::string coordination = "{}";
    std::string restart_scope = "Task";
    std::string preemption = "{}";
    int gpus = 0;               // nvidia.com/gpu each task asks for
    std::string coordinator{};  // spec.coordinator (JSON), if any
    std::string name = "train";
    std::string gang{};            // spec.gang (JSON), if any
    std::string load_time = "0s";  // each worker's simulated start-up (--load_time)
    int spares = 0;                // spec.spares
  };

  // A job of sample workers, named "train" unless told.
  absl::Status CreateJob(const JobOptions& o) {
    const std::string worker = kBuild + "/examples/sample_worker/phalanx-sample-worker";
    const std::string resources =
        o.gpus > 0 ? absl::StrCat(R"(,"resources":{"limits":{"nvidia.com/gpu":)", o.gpus, "}}")
                   : "";
    kube::Json job = kube::Json::parse(absl::StrCat(
        R"({"apiVersion":"phalanx.dev/v1alpha1","kind":"TrainingJob","metadata":{"name":")", o.name,
        R"("},"spec":{"replicas":)", o.replicas, R"(,"spares":)", o.spares,
        R"(,"failurePolicy":{"maxRestarts":3,"restartScope":")", o.restart_scope, R"(","backoff":)",
        o.backoff, R"(},
              "coordination":)",
        o.coordination, R"(,"preemption":)", o.preemption,
        o.coordinator.empty() ? "" : absl::StrCat(R"(,"coordinator":)", o.coordinator),
        o.gang.empty() ? "" : absl::StrCat(R"(,"gang":)", o.gang), R"(,
              "template":{"spec":{"terminationGracePeriodSeconds":1,"containers":[{"name":"worker","image":"sample","command":[")",
        worker, R"("],"args":["--steps=)", o.steps, R"(","--step_time=40ms","--load_time=)",
        o.load_time, R"(","--checkpoint_every=10","--checkpoint_dir=)",
        (dir_ / "ckpt" / o.name).string(), R"("])", resources, R"(}]}}}})"));
    return client_->Create(op::kTrainingJobs, ns_, job).status();
  }

  // A 2-task job of sample workers training `steps` steps of 40 ms.
  absl::Status CreateJob(int steps,
                         const std::string& backoff = R"({"baseSeconds":1,"maxSeconds":2})",
                         const std::string& coordination = "{}") {
    return CreateJob(JobOptions{.steps = steps, .backoff = backoff, .coordination = coordination});
  }

  bool PodExists(const std::string& name) { return client_->Get(op::kPods, ns_, name).ok(); }

  // Whether job "train" has an Event of `reason` whose message holds `message_part` (false when
  // the Events cannot be listed).
  bool JobHasEvent(const std::string& reason, const std::string& message_part = "") {
    absl::StatusOr<kube::ObjectList> events = client_->List(
        {"", "v1", "events", true}, ns_, {.field_selector = "involvedObject.name=train"});
    if (!events.ok()) return false;
    for (const kube::Json& e : events->items) {
      if (kube::StringAt(e, "reason") == reason &&
          absl::StrContains(kube::StringAt(e, "message"), message_part)) {
        return true;
      }
    }
    return false;
  }

  // Asks the local cluster to kill (SIGKILL) a pod of this case's namespace.
  bool KillPod(const std::string& pod) {
    return client_->Raw("POST", absl::StrCat("/admin/pods/", ns_, "/", pod, "/kill")).ok();
  }

  // The EVENT lines every pod of the job printed (the kubelet keeps each pod's log file,
  // "<namespace>_<pod>.log", also after the pod is deleted), pod by pod.
  std::map<std::string, std::vector<std::string>> WorkerEvents(const std::string& kind) {
    std::map<std::string, std::vector<std::string>> events;
    for (const auto& entry : std::filesystem::directory_iterator(logs_dir_)) {
      const std::string pod = entry.path().stem().string();
      if (!absl::StartsWith(pod, ns_ + "_")) continue;
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

  std::unique_ptr<process::Subprocess> StartOperator(int port_span = 2000,
                                                     const std::string& log_name = "operator") {
    return Start({kBuild + "/operator/phalanx-operator", "--kubeconfig", kubeconfig_,
                  "--coordinator_command", kBuild + "/runtime/coordination/phalanx-coordinator",
                  "--coordinator_address", "pod-ip", "--coordinator_port_base",
                  absl::StrCat(port_base_), "--coordinator_port_span", absl::StrCat(port_span),
                  "--metrics_listen", "127.0.0.1:0", "--lease_namespace", ns_,
                  // On a shared cluster, this case's namespace only ("" watches all).
                  absl::StrCat("--namespace=", ns_ == "default" ? "" : ns_)},
                 log_name, [](const std::string& l) { return absl::StartsWith(l, "ready "); });
  }

  int TaskPodCount() {
    absl::StatusOr<kube::ObjectList> pods =
        client_->List(op::kPods, ns_, {.label_selector = "phalanx.dev/role=task"});
    return pods.ok() ? static_cast<int>(pods->items.size()) : -1;
  }

  int nodes_ = 2;
  int gpus_per_node_ = 0;
  std::string backend_;  // "real" or "builtin", from the local cluster's ready line
  std::string kubeconfig_;
  int port_base_ = 0;
  std::filesystem::path dir_;
  std::string ns_ = "default";      // where this case's jobs and pods live
  std::filesystem::path logs_dir_;  // the kubelet's pod logs ("<namespace>_<pod>.log")
  std::unique_ptr<process::Subprocess> cluster_;
  std::unique_ptr<process::Subprocess> operator_;
  std::unique_ptr<kube::RestClient> client_;
};

}  // namespace phalanx::e2e
