// LocalCluster: the whole local cluster in one object — TLS material, an admin token, an API
// server on HTTPS, the scheduler + kubelet over virtual nodes — and the kubeconfig that reaches
// it. Two back ends behind the same URL, kubeconfig and fault injection:
//   - kReal: a real control plane (control_plane.h: etcd, kube-apiserver, kube-controller-manager
//     from envtest assets) behind ApiProxy (faults, admin endpoint, pod logs); the kubelet and
//     scheduler are its API clients (rest_access.h);
//   - kBuiltIn: the in-memory ObjectStore served by ApiServer, with periodic owner-reference
//     garbage collection; the kubelet and scheduler act on the store directly.
// kAuto picks kReal when FindEnvtestAssets() finds assets, else kBuiltIn (and says why).
// Two kinds of nodes: process nodes (kubelet.h: a pod's command runs as a local process, the
// image ignored) and real nodes (real_nodes/real_nodes.h: real kubelets 1.28 with containerd,
// kube-scheduler, kube-proxy and CoreDNS over a 1.28 control plane; pods run their images).
// Used in-process by tests and by the `phalanx-localcluster` binary. Thread-safe after Start.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/notification.h"
#include "common/base/clock.h"
#include "common/kube/cluster_config.h"
#include "tests/localcluster/api_proxy.h"
#include "tests/localcluster/api_server.h"
#include "tests/localcluster/control_plane.h"
#include "tests/localcluster/https_server.h"
#include "tests/localcluster/kubelet.h"
#include "tests/localcluster/real_nodes/real_nodes.h"
#include "tests/localcluster/resource_registry.h"
#include "tests/localcluster/rest_access.h"
#include "tests/localcluster/store_types.h"
#include "tests/localcluster/tls_material.h"

namespace phalanx::localcluster {

enum class Backend { kAuto, kBuiltIn, kReal };

// "auto", "builtin", "real"; nullopt for anything else.
std::optional<Backend> ParseBackend(const std::string& text);

// kAuto: real nodes when FindNodeAssets() finds everything they need, else process nodes.
enum class NodesKind { kAuto, kProcess, kReal };

// "auto", "process", "real"; nullopt for anything else.
std::optional<NodesKind> ParseNodesKind(const std::string& text);

struct LocalClusterOptions {
  Backend backend = Backend::kBuiltIn;
  int nodes = 2;  // process nodes: pods run as local processes
  int gpus_per_node = 0;
  int simulated_nodes = 0;  // simulated nodes: pods become Running without a process
  std::map<std::string, std::string> node_labels;  // added to every node
  std::vector<Json> node_taints;                   // added to every node
  // Full control instead of the counts above (when non-empty).
  std::vector<NodeConfig> node_configs;
  int port = 0;
  std::string work_dir;          // pod logs go to work_dir/logs; required
  std::string kubeconfig_out;    // default: work_dir/kubeconfig
  size_t history_limit = 50000;  // watch history; older resourceVersions get 410
  absl::Duration gc_interval = absl::Milliseconds(200);
  std::map<std::string, std::string> pod_env;  // added to every pod process's environment
  NodesKind nodes_kind = NodesKind::kProcess;
  // Real nodes: image archives imported into every node's containerd (e.g. `make images`'s).
  // Real nodes: a node whose kubelet stops answering is NotReady this long after, and its pods
  // are evicted this long after that (zero: Kubernetes' 40 s and 300 s).
  absl::Duration node_lost_after = absl::ZeroDuration();
  std::vector<std::string> image_archives;
  // Real nodes: the program whose `janitor` subcommand undoes the host changes should this
  // process die without stopping (phalanx-localcluster passes itself; empty: none).
  std::string janitor_program;
  std::string host_state_dir = kDefaultHostStateDir;
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

  // The back end that runs (never kAuto), and a line saying which and why ("kube-apiserver
  // v1.26.0 from KUBEBUILDER_ASSETS=/x", "built-in API server (no control-plane assets: ...)").
  Backend backend() const { return backend_; }
  const std::string& backend_description() const { return backend_description_; }
  // "real" or "builtin", as the ready line says.
  std::string backend_name() const { return backend_ == Backend::kReal ? "real" : "builtin"; }
  // "real" or "process", and which nodes run and why ("2 real kubelet(s) v1.28.7, containerd
  // 1.6.20", "2 process node(s) (real nodes need root ...)").
  std::string nodes_kind_name() const { return real_nodes_ != nullptr ? "real" : "process"; }
  const std::string& nodes_description() const { return nodes_description_; }

  const std::string& url() const { return url_; }
  const std::string& kubeconfig_path() const { return kubeconfig_path_; }
  const std::string& token() const { return token_; }
  const std::string& ca_pem() const { return tls_.ca_cert_pem; }
  // What a client needs to reach it (the same data as the kubeconfig).
  kube::ClusterConfig client_config() const;

  // Both back ends: 429/500 shares, dropped watches, the admin endpoint.
  FaultInjector& faults();
  Kubelet& kubelet() { return *kubelet_; }               // process nodes only
  RealNodes* real_nodes() { return real_nodes_.get(); }  // null on process nodes
  // The built-in back end's parts (crash on the real back end: a test that asks for them is
  // a built-in-only test).
  ObjectStore& store();
  ApiServer& api();
  // The real back end's control plane (null on the built-in one).
  ControlPlane* control_plane() { return control_plane_.get(); }

 private:
  LocalCluster(LocalClusterOptions options);
  absl::Status Init();
  absl::Status InitBuiltIn(int* port);
  absl::Status InitReal(const EnvtestAssets& assets, int* port);
  // Decides the nodes' kind; with real nodes, prepares the host (before the TLS material, whose
  // server certificate names node-0's address, and the control plane, which binds it).
  absl::Status ChooseNodes();
  absl::Status StartRealNodes();
  // The HTTPS front door (the built-in API server or the proxy) on options_.port; sets url_.
  absl::Status Serve(HttpHandler handler, int* port);
  absl::Status StartKubelet(int port);
  absl::Status WriteKubeconfig();

  LocalClusterOptions options_;
  base::RealClock clock_;
  TlsMaterial tls_;
  std::string token_;
  std::string url_;
  std::string kubeconfig_path_;
  ObjectStore store_;
  ResourceRegistry registry_;
  Backend backend_ = Backend::kBuiltIn;
  std::string backend_description_;
  std::unique_ptr<ApiServer> api_;                 // built-in
  std::unique_ptr<ControlPlane> control_plane_;    // real
  std::unique_ptr<kube::RestClient> node_client_;  // real: the node side's client
  std::unique_ptr<ApiProxy> proxy_;                // real
  std::unique_ptr<ClusterAccess> access_;
  std::unique_ptr<Kubelet> kubelet_;
  std::unique_ptr<RealNodes> real_nodes_;
  std::optional<NodeAssets> node_assets_;
  std::string nodes_description_;
  std::unique_ptr<FaultTarget> faults_target_;
  HttpsServer https_;
  absl::Notification stop_gc_;
  std::thread gc_thread_;
  bool stopped_ = false;
};

}  // namespace phalanx::localcluster
