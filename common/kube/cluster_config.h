// ClusterConfig: how to reach and authenticate to a Kubernetes API server, from a kubeconfig
// file (running outside a cluster, or against the local cluster) or from the pod's service
// account (in-cluster). Pure data plus loaders; no network. Thread-compatible.
#pragma once

#include <functional>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "common/base/env_and_files.h"

namespace phalanx::kube {

struct ClusterConfig {
  std::string server;  // https://host:port (no trailing slash)
  std::string ca_pem;  // CA bundle to verify the server; empty: system roots
  bool insecure_skip_tls_verify = false;
  std::string token;            // bearer token, if given inline
  std::string token_file;       // bearer token file, re-read when it rotates
  std::string client_cert_pem;  // client certificate auth
  std::string client_key_pem;
  std::string namespace_;  // the context's namespace ("default" when unset)
  std::string context;     // the context used (kubeconfig only)
};

// Parses kubeconfig YAML. `base_dir` resolves relative file paths (the file's directory).
// `context` overrides current-context when non-empty. Errors are InvalidArgument naming the
// offending field (e.g. "kubeconfig: users[name=admin].user.client-key-data is not base64"),
// NotFound for a referenced file that cannot be read.
absl::StatusOr<ClusterConfig> ParseKubeconfig(const std::string& yaml, const std::string& base_dir,
                                              const std::string& context = "");
// Reads and parses a kubeconfig file (NotFound if it cannot be read).
absl::StatusOr<ClusterConfig> LoadKubeconfig(const std::string& path,
                                             const std::string& context = "");

// In-cluster: KUBERNETES_SERVICE_HOST/PORT from `getenv` and the service account files under
// `account_dir` (token, ca.crt, namespace). FailedPrecondition when not running in a pod.
absl::StatusOr<ClusterConfig> InClusterConfig(
    const base::GetenvFn& getenv = nullptr,
    const std::string& account_dir = "/var/run/secrets/kubernetes.io/serviceaccount");

}  // namespace phalanx::kube
