// LocalCluster: the whole local cluster in one object — TLS material, the object store, the API
// server on HTTPS with a bearer token, the scheduler + kubelet over virtual nodes, periodic
// owner-reference garbage collection — and the kubeconfig that reaches it. Used in-process by
// tests and by the `phalanx-localcluster` binary. Thread-safe after Start.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/notification.h"
#include "common/base/clock.h"
#include "common/kube/cluster_config.h"
#include "tests/localcluster/api_server.h"
#include "tests/localcluster/https_server.h"
#include "tests/localcluster/kubelet.h"
#include "tests/localcluster/object_store.h"
#include "tests/localcluster/resource_registry.h"
#include "tests/localcluster/tls_material.h"

namespace phalanx::localcluster {

struct LocalClusterOptions {
  int nodes = 2;             // process nodes: pods run as local processes
  int gpus_per_node = 0;
  int simulated_nodes = 0;   // simulated nodes: pods become Running without a process
  std::map<std::string, std::string> node_labels;  // added to every node
  std::vector<Json> node_taints;                   // added to every node
  // Full control instead of the counts above (when non-empty).
  std::vector<NodeConfig> node_configs;
  int port = 0;
  std::string work_dir;        // pod logs go to work_dir/logs; required
  std::string kubeconfig_out;  // default: work_dir/kubeconfig
  size_t history_limit = 50000;  // watch history; older resourceVersions get 410
  absl::Duration gc_interval = absl::Milliseconds(200);
  std::map<std::string, std::string> pod_env;  // added to every pod process's environment
};

class LocalCluster {
 public:
  // Generates TLS material and a token, starts everything, writes the kubeconfig.
  static absl::StatusOr<std::unique_ptr<LocalCluster>> Start(LocalClusterOptions options);
  ~LocalCluster();
  LocalCluster(const LocalCluster&) = delete;
  LocalCluster& operator=(const LocalCluster&) = delete;

  // Stops serving and stops every pod process. Idempotent.
  void Stop();

  const std::string& url() const { return url_; }
  const std::string& kubeconfig_path() const { return kubeconfig_path_; }
  const std::string& token() const { return token_; }
  const std::string& ca_pem() const { return tls_.ca_cert_pem; }
  // What a client needs to reach it (the same data as the kubeconfig).
  kube::ClusterConfig client_config() const;

  ObjectStore& store() { return store_; }
  Kubelet& kubelet() { return *kubelet_; }
  ApiServer& api() { return *api_; }

 private:
  LocalCluster(LocalClusterOptions options);
  absl::Status Init();
  absl::Status WriteKubeconfig();

  LocalClusterOptions options_;
  base::RealClock clock_;
  TlsMaterial tls_;
  std::string token_;
  std::string url_;
  std::string kubeconfig_path_;
  ObjectStore store_;
  ResourceRegistry registry_;
  std::unique_ptr<ApiServer> api_;
  std::unique_ptr<Kubelet> kubelet_;
  std::unique_ptr<FaultTarget> faults_;
  HttpsServer https_;
  absl::Notification stop_gc_;
  std::thread gc_thread_;
  bool stopped_ = false;
};

}  // namespace phalanx::localcluster
