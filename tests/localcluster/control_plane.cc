#include "tests/localcluster/control_plane.h"

#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/base/log.h"
#include "common/kube/cluster_config.h"
#include "common/kube/rest_client.h"

namespace phalanx::localcluster {
namespace {

// A port nobody listens on now (the kernel's pick); the process we hand it to binds it a moment
// later. A lost race shows as that process failing to start, which Start reports.
absl::StatusOr<int> FreeLoopbackPort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return absl::InternalError("socket() failed");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  int port = -1;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  close(fd);
  if (port <= 0) return absl::InternalError("no free loopback port");
  return port;
}

absl::Status WriteFile(const std::string& path, const std::string& text, mode_t mode = 0600) {
  std::ofstream out(path, std::ios::trunc);
  out << text;
  if (!out.good()) return absl::InternalError(absl::StrCat("cannot write ", path));
  out.close();
  chmod(path.c_str(), mode);
  return absl::OkStatus();
}

// The last lines of a log, for start-up errors.
std::string Tail(const std::string& path, size_t lines = 15) {
  std::ifstream in(path);
  std::vector<std::string> all;
  std::string line;
  while (std::getline(in, line)) all.push_back(line);
  const size_t from = all.size() > lines ? all.size() - lines : 0;
  return absl::StrJoin(all.begin() + static_cast<long>(from), all.end(), "\n");
}

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
  absl::StatusOr<int> port = FreeLoopbackPort();
  if (!port.ok()) return port.status();
  port_ = *port;
  url_ = absl::StrCat("https://127.0.0.1:", port_);
  audit_log_ = Path("audit.log");
  const TlsMaterial& tls = options_.tls;
  for (const auto& [file, text] : std::vector<std::pair<std::string, std::string>>{
           {"ca.crt", tls.ca_cert_pem},
           {"apiserver.crt", tls.server_cert_pem},
           {"apiserver.key", tls.server_key_pem},
           {"service-account.key", tls.service_account_key_pem},
           {"service-account.pub", tls.service_account_public_pem},
           {"tokens.csv", absl::StrCat(options_.admin_token,
                                       ",phalanx-admin,phalanx-admin,\"system:masters\"\n")},
           {"audit-policy.yaml", kAuditPolicy},
           {"controller-manager.kubeconfig",
            absl::StrCat("apiVersion: v1\nkind: Config\nclusters:\n- name: local\n  cluster:\n"
                         "    server: ",
                         url_, "\n    certificate-authority: ", Path("ca.crt"),
                         "\nusers:\n- name: admin\n  user:\n    token: ", options_.admin_token,
                         "\ncontexts:\n- name: local\n  context:\n    cluster: local\n"
                         "    user: admin\ncurrent-context: local\n")}}) {
    if (absl::Status s = WriteFile(Path(file), text); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status ControlPlane::StartEtcd() {
  absl::StatusOr<int> client_port = FreeLoopbackPort();
  absl::StatusOr<int> peer_port = FreeLoopbackPort();
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
  o.argv = {options_.assets.kube_apiserver, "--etcd-servers=" + etcd_url_,
            "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
            absl::StrCat("--secure-port=", port_), "--tls-cert-file=" + Path("apiserver.crt"),
            "--tls-private-key-file=" + Path("apiserver.key"), "--client-ca-file=" + Path("ca.crt"),
            "--token-auth-file=" + Path("tokens.csv"), "--authorization-mode=Node,RBAC",
            "--enable-admission-plugins=NodeRestriction,OwnerReferencesPermissionEnforcement",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            "--service-account-key-file=" + Path("service-account.pub"),
            "--service-account-signing-key-file=" + Path("service-account.key"),
            "--service-cluster-ip-range=10.96.0.0/16",
            // A loopback address is not a valid endpoint for the kubernetes Service.
            "--endpoint-reconciler-type=none", "--allow-privileged=true",
            "--audit-policy-file=" + Path("audit-policy.yaml"), "--audit-log-path=" + audit_log_,
            "--audit-log-maxsize=200", "--v=1"};
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
            " while waiting for ", what, "; ", Path(log), " ends:\n", Tail(Path(log))));
      }
    }
    if (absl::Now() >= deadline) {
      return absl::UnavailableError(absl::StrCat(
          "control plane: no ", what, " within ", absl::FormatDuration(options_.start_timeout),
          "; ", Path("kube-apiserver.log"), " ends:\n", Tail(Path("kube-apiserver.log"))));
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
