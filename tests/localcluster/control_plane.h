// ControlPlane: a real Kubernetes control plane on loopback for the local cluster's "real" back
// end — etcd, kube-apiserver and (when the assets have it) kube-controller-manager, started
// from envtest-style assets (envtest_assets.h) as child processes, with generated TLS material,
// a static admin token (group system:masters), a ServiceAccount signing key, RBAC and Node
// authorization, the default admission plugins (PodSecurity among them) plus NodeRestriction
// and OwnerReferencesPermissionEnforcement, and an audit log of every request's metadata (tests
// read it for 403s). There is no kubelet, scheduler or container runtime: the local cluster's
// own node side (kubelet.h over rest_access.h) plays those as API clients.
//
// Start() returns once /readyz answers and the default ServiceAccount exists (pods need it);
// Stop() ends the processes (SIGTERM, SIGKILL after a bound) and keeps their logs in
// `work_dir` (etcd.log, kube-apiserver.log, kube-controller-manager.log, audit.log).
// Thread-safe after Start.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/process/subprocess.h"
#include "tests/localcluster/envtest_assets.h"
#include "tests/localcluster/tls_material.h"

namespace phalanx::localcluster {

struct ControlPlaneOptions {
  EnvtestAssets assets;
  std::string work_dir;     // created; holds certificates, etcd's data and the logs
  TlsMaterial tls;          // the API server serves tls.server_cert_pem
  std::string admin_token;  // system:masters
  // Where kube-apiserver listens and what it advertises. Loopback (the default) leaves the
  // kubernetes Service without endpoints (a loopback address is not a valid one); real nodes
  // give an address their pods reach (the Service's endpoint, through kube-proxy).
  std::string bind_address = "127.0.0.1";
  // More `token,user,uid,"groups"` lines for the static token file (real nodes' kubelets,
  // kube-scheduler, kube-proxy, CoreDNS).
  std::vector<std::string> extra_token_lines;
  // Appended to kube-apiserver's and kube-controller-manager's command lines.
  std::vector<std::string> extra_apiserver_flags;
  std::vector<std::string> extra_controller_manager_flags;
  absl::Duration start_timeout = absl::Seconds(90);
};

class ControlPlane {
 public:
  // Unavailable (with the tail of the failing process's log) when a process exits or the API
  // server is not ready within start_timeout; Internal for file-system errors.
  static absl::StatusOr<std::unique_ptr<ControlPlane>> Start(ControlPlaneOptions options);
  ~ControlPlane();  // Stop()
  ControlPlane(const ControlPlane&) = delete;
  ControlPlane& operator=(const ControlPlane&) = delete;

  // https://<bind_address>:PORT of kube-apiserver itself.
  const std::string& url() const { return url_; }
  int port() const { return port_; }
  // The API server's gitVersion ("v1.26.0").
  const std::string& version() const { return version_; }
  const std::string& audit_log() const { return audit_log_; }
  // The CA certificate's file (clients of real nodes name it in their kubeconfigs).
  std::string ca_file() const { return Path("ca.crt"); }
  // Idempotent.
  void Stop();

 private:
  explicit ControlPlane(ControlPlaneOptions options) : options_(std::move(options)) {}
  absl::Status Init();
  absl::Status WriteFiles();
  absl::Status StartEtcd();
  absl::Status StartApiServer();
  absl::Status StartControllerManager();
  // Polls until `ready` holds, a watched process exits, or the deadline passes.
  absl::Status WaitUntil(const std::string& what, const std::function<bool()>& ready,
                         absl::Time deadline);
  std::string Path(const std::string& file) const { return options_.work_dir + "/" + file; }

  ControlPlaneOptions options_;
  std::string url_;
  std::string etcd_url_;
  int port_ = 0;
  std::string version_;
  std::string audit_log_;
  std::unique_ptr<process::Subprocess> etcd_;
  std::unique_ptr<process::Subprocess> apiserver_;
  std::unique_ptr<process::Subprocess> controller_manager_;
  bool stopped_ = false;
};

}  // namespace phalanx::localcluster
