#include "tests/localcluster/local_cluster.h"

#include <openssl/rand.h>
#include <sys/stat.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "common/base/log.h"
#include "common/kube/object_meta.h"

namespace phalanx::localcluster {
namespace {

// Forwards the admin endpoint's pod and node faults to the kubelet.
class KubeletFaults final : public FaultTarget {
 public:
  explicit KubeletFaults(Kubelet& kubelet) : kubelet_(kubelet) {}
  absl::Status KillPod(const std::string& ns, const std::string& name, int signal) override {
    return kubelet_.KillPod(ns, name, signal);
  }
  absl::Status StopPod(const std::string& ns, const std::string& name) override {
    return kubelet_.StopPod(ns, name);
  }
  absl::Status ContinuePod(const std::string& ns, const std::string& name) override {
    return kubelet_.ContinuePod(ns, name);
  }
  absl::Status FailPod(const std::string& ns, const std::string& name, int exit_code) override {
    return kubelet_.FailPod(ns, name, exit_code);
  }
  absl::Status PreemptNode(const std::string& node, absl::Duration grace) override {
    return kubelet_.PreemptNode(node, grace);
  }
  absl::Status SetNodeReady(const std::string& node, bool ready) override {
    return kubelet_.SetNodeReady(node, ready);
  }

 private:
  Kubelet& kubelet_;
};

std::string RandomToken() {
  unsigned char bytes[24];
  RAND_bytes(bytes, sizeof(bytes));
  return absl::BytesToHexString(
      absl::string_view(reinterpret_cast<const char*>(bytes), sizeof(bytes)));
}

Json NamespaceObject(const std::string& name) {
  Json ns = Json::object();
  ns["apiVersion"] = Json::string("v1");
  ns["kind"] = Json::string("Namespace");
  ns["metadata"] = Json::object();
  ns["metadata"]["name"] = Json::string(name);
  ns["status"] = Json::object();
  ns["status"]["phase"] = Json::string("Active");
  return ns;
}

}  // namespace

LocalCluster::LocalCluster(LocalClusterOptions options)
    : options_(std::move(options)), store_(clock_, options_.history_limit) {}

absl::StatusOr<std::unique_ptr<LocalCluster>> LocalCluster::Start(LocalClusterOptions options) {
  if (options.work_dir.empty()) return absl::InvalidArgumentError("work_dir is required");
  std::unique_ptr<LocalCluster> cluster(new LocalCluster(std::move(options)));
  if (absl::Status s = cluster->Init(); !s.ok()) {
    cluster->Stop();
    return s;
  }
  return cluster;
}

absl::Status LocalCluster::Init() {
  std::error_code ec;
  std::filesystem::create_directories(options_.work_dir + "/logs", ec);
  if (ec) {
    return absl::InternalError(
        absl::StrCat("cannot create ", options_.work_dir, "/logs: ", ec.message()));
  }
  if (absl::Status s = ChooseNodes(); !s.ok()) return s;
  std::vector<std::string> sans;
  if (real_nodes_ != nullptr) {
    // Pods reach the API server as the kubernetes Service (10.96.0.1, kubernetes.default.svc)
    // whose endpoint is node-0's address.
    sans = {"IP:" + real_nodes_->api_address(),
            std::string("IP:") + kKubernetesServiceIp,
            "DNS:kubernetes",
            "DNS:kubernetes.default",
            "DNS:kubernetes.default.svc",
            std::string("DNS:kubernetes.default.svc.") + kClusterDomain};
  }
  absl::StatusOr<TlsMaterial> tls = GenerateTlsMaterial(sans);
  if (!tls.ok()) return tls.status();
  tls_ = *std::move(tls);
  token_ = RandomToken();
  kubeconfig_path_ =
      options_.kubeconfig_out.empty() ? options_.work_dir + "/kubeconfig" : options_.kubeconfig_out;

  int port = 0;
  if (real_nodes_ != nullptr) {
    if (absl::Status s = InitReal(node_assets_->control_plane, &port); !s.ok()) return s;
    if (absl::Status s = StartRealNodes(); !s.ok()) return s;
    return WriteKubeconfig();
  }
  if (options_.backend == Backend::kBuiltIn) {
    backend_description_ = "built-in API server (asked for)";
    if (absl::Status s = InitBuiltIn(&port); !s.ok()) return s;
  } else {
    absl::StatusOr<EnvtestAssets> assets = FindEnvtestAssets();
    if (assets.ok()) {
      if (absl::Status s = InitReal(*assets, &port); !s.ok()) return s;
    } else if (options_.backend == Backend::kReal || absl::IsFailedPrecondition(assets.status())) {
      return assets.status();
    } else {
      backend_description_ = absl::StrCat("built-in API server (", assets.status().message(), ")");
      if (absl::Status s = InitBuiltIn(&port); !s.ok()) return s;
    }
  }
  if (absl::Status s = StartKubelet(port); !s.ok()) return s;
  return WriteKubeconfig();
}

absl::Status LocalCluster::ChooseNodes() {
  const int count = options_.nodes + options_.simulated_nodes;
  nodes_description_ = absl::StrCat(options_.nodes, " process node(s)");
  if (options_.nodes_kind == NodesKind::kProcess) return absl::OkStatus();
  absl::StatusOr<NodeAssets> assets = FindNodeAssets();
  if (!assets.ok()) {
    if (options_.nodes_kind == NodesKind::kReal) return assets.status();
    absl::StrAppend(&nodes_description_, " (", assets.status().message(), ")");
    return absl::OkStatus();
  }
  if (options_.backend == Backend::kBuiltIn) {
    return absl::InvalidArgumentError(
        "real nodes need the real control plane (--backend real or auto), not the built-in one");
  }
  if (options_.simulated_nodes > 0 || !options_.node_configs.empty() || count == 0) {
    return absl::InvalidArgumentError(
        "real nodes: --nodes N (at least 1) only; simulated nodes need process nodes");
  }
  node_assets_ = *assets;
  RealNodesOptions nodes_options;
  nodes_options.assets = *assets;
  nodes_options.work_dir = std::filesystem::absolute(options_.work_dir).lexically_normal();
  nodes_options.nodes = options_.nodes;
  nodes_options.gpus_per_node = options_.gpus_per_node;
  nodes_options.node_labels = options_.node_labels;
  nodes_options.node_lost_after = options_.node_lost_after;
  nodes_options.node_taints = options_.node_taints;
  nodes_options.image_archives = options_.image_archives;
  nodes_options.janitor_program = options_.janitor_program;
  nodes_options.state_dir = options_.host_state_dir;
  absl::StatusOr<std::unique_ptr<RealNodes>> nodes = RealNodes::Prepare(nodes_options);
  if (!nodes.ok()) return nodes.status();
  real_nodes_ = *std::move(nodes);
  return absl::OkStatus();
}

absl::Status LocalCluster::StartRealNodes() {
  if (absl::Status s = real_nodes_->Start(control_plane_->url(), control_plane_->ca_file(), token_);
      !s.ok()) {
    return s;
  }
  nodes_description_ = real_nodes_->Description();
  faults().set_fault_target(real_nodes_.get());
  return absl::OkStatus();
}

absl::Status LocalCluster::InitBuiltIn(int* port) {
  backend_ = Backend::kBuiltIn;
  for (const ResourceType& t : registry_.All()) {
    if (t.status_subresource) store_.EnableStatusSubresource(t.StoreKey());
  }
  for (const char* ns : {"default", "kube-system", "kube-public", "kube-node-lease"}) {
    if (absl::StatusOr<Json> created =
            store_.Create("namespaces", "", NamespaceObject(ns), /*keep_status=*/true);
        !created.ok()) {
      return created.status();
    }
  }

  ApiServer::Options api_options;
  api_options.token = token_;
  api_options.log_dir = options_.work_dir + "/logs";
  api_ = std::make_unique<ApiServer>(store_, registry_, clock_, api_options);

  if (absl::Status s = Serve(
          [this](const HttpRequest& req, HttpResponse& resp) { api_->Handle(req, resp); }, port);
      !s.ok()) {
    return s;
  }
  api_->set_address(absl::StrCat("127.0.0.1:", *port));
  access_ = std::make_unique<StoreAccess>(store_, clock_);

  gc_thread_ = std::thread([this] {
    while (!stop_gc_.WaitForNotificationWithTimeout(options_.gc_interval)) {
      store_.CollectGarbage();
    }
  });
  return absl::OkStatus();
}

absl::Status LocalCluster::InitReal(const EnvtestAssets& assets, int* port) {
  backend_ = Backend::kReal;
  ControlPlaneOptions plane_options;
  plane_options.assets = assets;
  plane_options.work_dir = options_.work_dir + "/control-plane";
  plane_options.tls = tls_;
  plane_options.admin_token = token_;
  if (real_nodes_ != nullptr) {
    plane_options.bind_address = real_nodes_->api_address();
    plane_options.extra_token_lines = real_nodes_->TokenLines();
    plane_options.extra_apiserver_flags = real_nodes_->ApiServerFlags();
    plane_options.extra_controller_manager_flags = real_nodes_->ControllerManagerFlags();
  }
  absl::StatusOr<std::unique_ptr<ControlPlane>> plane = ControlPlane::Start(plane_options);
  if (!plane.ok()) return plane.status();
  control_plane_ = *std::move(plane);
  backend_description_ = absl::StrCat(
      "kube-apiserver ", control_plane_->version(), " from ",
      assets.source == "KUBEBUILDER_ASSETS" ? "KUBEBUILDER_ASSETS=" + assets.dir : assets.dir);

  ApiProxy::Options proxy_options;
  proxy_options.upstream_address = plane_options.bind_address;
  proxy_options.upstream_port = control_plane_->port();
  proxy_options.upstream_ca_pem = tls_.ca_cert_pem;
  proxy_options.admin_token = token_;
  if (real_nodes_ == nullptr) proxy_options.log_dir = options_.work_dir + "/logs";
  proxy_ = std::make_unique<ApiProxy>(proxy_options);
  if (absl::Status s = Serve(
          [this](const HttpRequest& req, HttpResponse& resp) { proxy_->Handle(req, resp); }, port);
      !s.ok()) {
    return s;
  }
  if (real_nodes_ != nullptr) return absl::OkStatus();  // real kubelets are their own clients

  // The node side talks to the API server itself, not through the proxy: injected faults are
  // for the clients under test, as a real cluster's kubelets do not share the operator's path.
  kube::ClusterConfig node_config;
  node_config.server = control_plane_->url();
  node_config.ca_pem = tls_.ca_cert_pem;
  node_config.token = token_;
  kube::RestClientOptions client_options;
  client_options.qps = 0;  // a kubelet for every node: no client-side limit
  client_options.user_agent = "phalanx-localcluster/kubelet";
  absl::StatusOr<std::unique_ptr<kube::RestClient>> client =
      kube::RestClient::Create(node_config, client_options);
  if (!client.ok()) return client.status();
  node_client_ = *std::move(client);
  auto rest = std::make_unique<RestAccess>(*node_client_, clock_, options_.history_limit);
  if (absl::Status s = rest->Start(absl::Seconds(30)); !s.ok()) return s;
  access_ = std::move(rest);
  return absl::OkStatus();
}

absl::Status LocalCluster::Serve(HttpHandler handler, int* port) {
  HttpsServer::Options https_options;
  https_options.port = options_.port;
  https_options.cert_pem = tls_.server_cert_pem;
  https_options.key_pem = tls_.server_key_pem;
  absl::StatusOr<int> bound = https_.Start(https_options, std::move(handler));
  if (!bound.ok()) return bound.status();
  *port = *bound;
  url_ = absl::StrCat("https://127.0.0.1:", *bound);
  return absl::OkStatus();
}

absl::Status LocalCluster::StartKubelet(int port) {
  Kubelet::Options kubelet_options;
  kubelet_options.log_dir = options_.work_dir + "/logs";
  kubelet_options.extra_env = options_.pod_env;
  kubelet_options.extra_env["KUBERNETES_SERVICE_HOST"] = "127.0.0.1";
  kubelet_options.extra_env["KUBERNETES_SERVICE_PORT"] = absl::StrCat(port);
  kubelet_options.nodes = options_.node_configs;
  if (kubelet_options.nodes.empty()) {
    for (int i = 0; i < options_.nodes + options_.simulated_nodes; ++i) {
      NodeConfig node;
      const bool simulated = i >= options_.nodes;
      node.name =
          simulated ? absl::StrCat("sim-node-", i - options_.nodes) : absl::StrCat("node-", i);
      node.gpus = options_.gpus_per_node;
      // node-0 keeps 127.0.0.1; node i > 0 gets 127.1.<i / 256>.<i % 256>: distinct loopback
      // addresses (all of 127/8 is local), so per-node listeners can share a port.
      if (i > 0) node.ip = absl::StrCat("127.1.", i / 256, ".", i % 256);
      node.labels = options_.node_labels;
      if (simulated) node.labels["phalanx.dev/simulated-node"] = "true";
      node.taints = options_.node_taints;
      node.simulated = simulated;
      kubelet_options.nodes.push_back(std::move(node));
    }
  }
  if (kubelet_options.nodes.empty()) return absl::OkStatus();
  kubelet_ = std::make_unique<Kubelet>(*access_, clock_, kubelet_options);
  if (absl::Status s = kubelet_->Start(); !s.ok()) return s;
  faults_target_ = std::make_unique<KubeletFaults>(*kubelet_);
  faults().set_fault_target(faults_target_.get());
  return absl::OkStatus();
}

FaultInjector& LocalCluster::faults() {
  return proxy_ != nullptr ? proxy_->faults() : api_->faults();
}

ObjectStore& LocalCluster::store() {
  if (backend_ != Backend::kBuiltIn) {
    PHX_LOG(ERROR) << "LocalCluster::store() on the real back end: a built-in-only test";
    std::abort();
  }
  return store_;
}

ApiServer& LocalCluster::api() {
  if (api_ == nullptr) {
    PHX_LOG(ERROR) << "LocalCluster::api() on the real back end: a built-in-only test";
    std::abort();
  }
  return *api_;
}

std::optional<Backend> ParseBackend(const std::string& text) {
  if (text == "auto") return Backend::kAuto;
  if (text == "builtin" || text == "built-in") return Backend::kBuiltIn;
  if (text == "real") return Backend::kReal;
  return std::nullopt;
}

std::optional<NodesKind> ParseNodesKind(const std::string& text) {
  if (text == "auto") return NodesKind::kAuto;
  if (text == "process") return NodesKind::kProcess;
  if (text == "real") return NodesKind::kReal;
  return std::nullopt;
}

absl::Status LocalCluster::WriteKubeconfig() {
  const std::string text = absl::StrCat(
      "# Written by phalanx-localcluster: a local test cluster (", backend_description_,
      ").\n"
      "apiVersion: v1\nkind: Config\nclusters:\n- name: phalanx-local\n  cluster:\n    server: ",
      url_, "\n    certificate-authority-data: ", absl::Base64Escape(tls_.ca_cert_pem),
      "\nusers:\n- name: phalanx-admin\n  user:\n    token: ", token_,
      "\ncontexts:\n- name: phalanx-local\n  context:\n    cluster: phalanx-local\n"
      "    user: phalanx-admin\n    namespace: default\ncurrent-context: phalanx-local\n");
  const std::string tmp = kubeconfig_path_ + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << text;
    if (!out.good()) return absl::InternalError(absl::StrCat("cannot write ", tmp));
  }
  chmod(tmp.c_str(), 0600);  // it holds the admin token
  if (std::rename(tmp.c_str(), kubeconfig_path_.c_str()) != 0) {
    return absl::InternalError(absl::StrCat("cannot write ", kubeconfig_path_));
  }
  return absl::OkStatus();
}

kube::ClusterConfig LocalCluster::client_config() const {
  kube::ClusterConfig config;
  config.server = url_;
  config.ca_pem = tls_.ca_cert_pem;
  config.token = token_;
  config.namespace_ = "default";
  return config;
}

void LocalCluster::Stop() {
  if (stopped_) return;
  stopped_ = true;
  stop_gc_.Notify();
  if (gc_thread_.joinable()) gc_thread_.join();
  https_.Stop();
  // Pods first (the kubelet still reaches the API server to see them go), then the node side's
  // watches, then the control plane.
  if (kubelet_) kubelet_->Stop();
  if (real_nodes_) real_nodes_->Stop();
  if (access_) access_->Stop();
  if (control_plane_) control_plane_->Stop();
}

LocalCluster::~LocalCluster() { Stop(); }

}  // namespace phalanx::localcluster
