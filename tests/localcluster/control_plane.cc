#include "tests/localcluster/control_plane.h"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/base/log.h"
#include "common/kube/cluster_config.h"
#include "common/kube/rest_client.h"
#include "tests/localcluster/free_port.h"
#include "tests/localcluster/text_files.h"

namespace phalanx::localcluster {
namespace {

// Every request's metadata (user, verb, resource, response code), without bodies: enough to
// find a 403, cheap enough to keep on.
constexpr char kAuditPolicy[] = R"(apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Metadata
)";

}  // namespace

absl::StatusOr<std::unique_ptr<ControlPlane>> ControlPlane::Start(ControlPlaneOptions options) {
  std::unique_ptr<ControlPlane> plane(new ControlPlane(std::move(options)));
  if (absl::Status s = plane->Init(); !s.ok()) {
    plane->Stop();
    return s;
  }
  return plane;
}

absl::Status ControlPlane::Init() {
  const absl::Time deadline = absl::Now() + options_.start_timeout;
  if (absl::Status s = WriteFiles(); !s.ok()) return s;
  if (absl::Status s = StartEtcd(); !s.ok()) return s;
  if (absl::Status s = StartApiServer(); !s.ok()) return s;

  kube::ClusterConfig config;
  config.server = url_;
  config.ca_pem = options_.tls.ca_cert_pem;
  config.token = options_.admin_token;
  absl::StatusOr<std::unique_ptr<kube::RestClient>> client = kube::RestClient::Create(config);
  if (!client.ok()) return client.status();
  auto answers = [&](const std::string& path) { return (*client)->Raw("GET", path).ok(); };
  if (absl::Status s = WaitUntil(
          "kube-apiserver /readyz", [&] { return answers("/readyz"); }, deadline);
      !s.ok()) {
    return s;
  }
  if (absl::StatusOr<std::string> version = (*client)->Raw("GET", "/version"); version.ok()) {
    try {
      version_ = web::json::value::parse(*version).at("gitVersion").as_string();
    } catch (const std::exception&) {
      version_ = "unknown";
    }
  }
  if (options_.assets.kube_controller_manager.empty()) {
    PHX_LOG(WARNING) << "control plane: no kube-controller-manager in " << options_.assets.dir
                     << ": no garbage collection, namespace deletion or ServiceAccounts";
    return absl::OkStatus();
  }
  if (absl::Status s = StartControllerManager(); !s.ok()) return s;
  // Pods are refused until their namespace's default ServiceAccount exists.
  return WaitUntil(
      "the default ServiceAccount (kube-controller-manager)",
      [&] { return answers("/api/v1/namespaces/default/serviceaccounts/default"); }, deadline);
}

absl::Status ControlPlane::WriteFiles() {
  std::error_code ec;
  std::filesystem::create_directories(Path("etcd"), ec);
  if (ec)
    return absl::InternalError(absl::StrCat("cannot create ", Path("etcd"), ": ", ec.message()));
  absl::StatusOr<int> port = FreeTcpPort();
  if (!port.ok()) return port.status();
  port_ = *port;
  url_ = absl::StrCat("https://", options_.bind_address, ":", port_);
  audit_log_ = Path("audit.log");
  const TlsMaterial& tls = options_.tls;
  for (const auto& [file, text] : std::vector<std::pair<std::string, std::string>>{
           {"ca.crt", tls.ca_cert_pem},
           {"apiserver.crt", tls.server_cert_pem},
           {"apiserver.key", tls.server_key_pem},
           {"service-account.key", tls.service_account_key_pem},
           {"service-account.pub", tls.service_account_public_pem},
           {"tokens.csv",
            absl::StrCat(options_.admin_token, ",phalanx-admin,phalanx-admin,\"system:masters\"\n",
                         absl::StrJoin(options_.extra_token_lines, "\n"), "\n")},
           {"kubelet-client.crt", tls.kubelet_client_cert_pem},
           {"kubelet-client.key", tls.kubelet_client_key_pem},
           {"audit-policy.yaml", kAuditPolicy},
           {"controller-manager.kubeconfig",
            absl::StrCat("apiVersion: v1\nkind: Config\nclusters:\n- name: local\n  cluster:\n"
                         "    server: ",
                         url_, "\n    certificate-authority: ", Path("ca.crt"),
                         "\nusers:\n- name: admin\n  user:\n    token: ", options_.admin_token,
                         "\ncontexts:\n- name: local\n  context:\n    cluster: local\n"
                         "    user: admin\ncurrent-context: local\n")}}) {
    if (absl::Status s = WriteTextFile(Path(file), text); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status ControlPlane::StartEtcd() {
  absl::StatusOr<int> client_port = FreeTcpPort();
  absl::StatusOr<int> peer_port = FreeTcpPort();
  if (!client_port.ok()) return client_port.status();
  if (!peer_port.ok()) return peer_port.status();
  const std::string client_url = absl::StrCat("http://127.0.0.1:", *client_port);
  const std::string peer_url = absl::StrCat("http://127.0.0.1:", *peer_port);
  process::SubprocessOptions o;
  o.argv = {options_.assets.etcd,
            "--name",
            "phalanx",
            "--data-dir",
            Path("etcd"),
            "--listen-client-urls",
            client_url,
            "--advertise-client-urls",
            client_url,
            "--listen-peer-urls",
            peer_url,
            "--initial-advertise-peer-urls",
            peer_url,
            "--initial-cluster",
            "phalanx=" + peer_url,
            "--log-level",
            "warn"};
  o.stdout_path = Path("etcd.log");
  o.die_with_parent = true;  // never outlive the local cluster, even a SIGKILLed one
  absl::StatusOr<std::unique_ptr<process::Subprocess>> etcd = process::Subprocess::Start(o);
  if (!etcd.ok()) return etcd.status();
  etcd_ = *std::move(etcd);
  etcd_url_ = client_url;
  return absl::OkStatus();
}

absl::Status ControlPlane::StartApiServer() {
  process::SubprocessOptions o;
  const bool loopback = absl::StartsWith(options_.bind_address, "127.");
  o.argv = {options_.assets.kube_apiserver, "--etcd-servers=" + etcd_url_,
            "--bind-address=" + options_.bind_address,
            "--advertise-address=" + options_.bind_address, absl::StrCat("--secure-port=", port_),
            "--tls-cert-file=" + Path("apiserver.crt"),
            "--tls-private-key-file=" + Path("apiserver.key"), "--client-ca-file=" + Path("ca.crt"),
            "--token-auth-file=" + Path("tokens.csv"), "--authorization-mode=Node,RBAC",
            "--enable-admission-plugins=NodeRestriction,OwnerReferencesPermissionEnforcement",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            "--service-account-key-file=" + Path("service-account.pub"),
            "--service-account-signing-key-file=" + Path("service-account.key"),
            "--service-cluster-ip-range=10.96.0.0/16",
            // A loopback address is not a valid endpoint for the kubernetes Service.
            loopback ? "--endpoint-reconciler-type=none" : "--endpoint-reconciler-type=lease",
            "--allow-privileged=true",
            // Real nodes: `kubectl logs`/`exec` reach the kubelet at its InternalIP, as the
            // API server's client (the kubelet's webhook authorizes system:masters).
            "--kubelet-client-certificate=" + Path("kubelet-client.crt"),
            "--kubelet-client-key=" + Path("kubelet-client.key"),
            "--kubelet-preferred-address-types=InternalIP,Hostname",
            "--audit-policy-file=" + Path("audit-policy.yaml"), "--audit-log-path=" + audit_log_,
            "--audit-log-maxsize=200", "--v=1"};
  o.argv.insert(o.argv.end(), options_.extra_apiserver_flags.begin(),
                options_.extra_apiserver_flags.end());
  o.stdout_path = Path("kube-apiserver.log");
  o.die_with_parent = true;  // never outlive the local cluster, even a SIGKILLed one
  absl::StatusOr<std::unique_ptr<process::Subprocess>> p = process::Subprocess::Start(o);
  if (!p.ok()) return p.status();
  apiserver_ = *std::move(p);
  return absl::OkStatus();
}

absl::Status ControlPlane::StartControllerManager() {
  process::SubprocessOptions o;
  o.argv = {options_.assets.kube_controller_manager,
            "--kubeconfig=" + Path("controller-manager.kubeconfig"),
            // No cloud, no node IPAM, no Service load balancers or routes on loopback.
            "--controllers=*,-nodeipam,-cloud-node-lifecycle,-service,-route",
            "--use-service-account-credentials", "--root-ca-file=" + Path("ca.crt"),
            "--service-account-private-key-file=" + Path("service-account.key"),
            "--leader-elect=false", "--bind-address=127.0.0.1", "--secure-port=0", "--v=1"};
  o.argv.insert(o.argv.end(), options_.extra_controller_manager_flags.begin(),
                options_.extra_controller_manager_flags.end());
  o.stdout_path = Path("kube-controller-manager.log");
  o.die_with_parent = true;  // never outlive the local cluster, even a SIGKILLed one
  absl::StatusOr<std::unique_ptr<process::Subprocess>> p = process::Subprocess::Start(o);
  if (!p.ok()) return p.status();
  controller_manager_ = *std::move(p);
  return absl::OkStatus();
}

absl::Status ControlPlane::WaitUntil(const std::string& what, const std::function<bool()>& ready,
                                     absl::Time deadline) {
  const std::vector<std::pair<process::Subprocess*, std::string>> watched = {
      {etcd_.get(), "etcd.log"},
      {apiserver_.get(), "kube-apiserver.log"},
      {controller_manager_.get(), "kube-controller-manager.log"}};
  while (true) {
    if (ready()) return absl::OkStatus();
    for (const auto& [process, log] : watched) {
      if (process == nullptr) continue;
      if (std::optional<int> code = process->ExitCode(); code.has_value()) {
        return absl::UnavailableError(absl::StrCat(
            "control plane: ", log.substr(0, log.find('.')), " exited with ", *code,
            " while waiting for ", what, "; ", Path(log), " ends:\n", LogTail(Path(log))));
      }
    }
    if (absl::Now() >= deadline) {
      return absl::UnavailableError(absl::StrCat(
          "control plane: no ", what, " within ", absl::FormatDuration(options_.start_timeout),
          "; ", Path("kube-apiserver.log"), " ends:\n", LogTail(Path("kube-apiserver.log"))));
    }
    // Start-up polling of child processes (test harness; bounded by the deadline above).
    absl::SleepFor(absl::Milliseconds(100));
  }
}

void ControlPlane::Stop() {
  if (stopped_) return;
  stopped_ = true;
  // The clients first, etcd last, so nothing logs a storm of etcd errors on the way out.
  for (auto* p : {&controller_manager_, &apiserver_, &etcd_}) {
    if (*p == nullptr) continue;
    (*p)->Signal(SIGTERM);
    // Bounded so that the whole stop fits the 30 s a test harness gives phalanx-localcluster.
    if (!(*p)->Wait(absl::Seconds(5)).has_value()) {
      (*p)->Signal(SIGKILL);
      (*p)->Wait(absl::Seconds(5));
    }
    p->reset();
  }
}

ControlPlane::~ControlPlane() { Stop(); }

}  // namespace phalanx::localcluster
