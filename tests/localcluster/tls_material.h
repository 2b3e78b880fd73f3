// TLS material the local cluster generates at start: a throwaway CA and a server certificate for
// 127.0.0.1/localhost signed by it (ECDSA P-256, valid for a year). Clients trust the CA through
// the kubeconfig the cluster writes, so the client's certificate verification runs exactly as it
// does against a real API server; a real kube-apiserver (control_plane.h) serves the same
// certificate, and the same CA verifies the proxy in front of it. Pure OpenSSL; thread-safe.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace phalanx::localcluster {

struct TlsMaterial {
  std::string ca_cert_pem;
  std::string server_cert_pem;
  std::string server_key_pem;
  // Signs ServiceAccount tokens (a real control plane's --service-account-signing-key-file).
  std::string service_account_key_pem;
  std::string service_account_public_pem;  // its public half (--service-account-key-file)
  // The API server's client certificate towards kubelets (CN kube-apiserver-kubelet-client,
  // O system:masters): a real kubelet authenticates `kubectl logs`/`exec` calls with it.
  std::string kubelet_client_cert_pem;
  std::string kubelet_client_key_pem;
};

// `extra_sans`: more subject alternative names for the server certificate, as OpenSSL writes
// them ("IP:10.96.0.1", "DNS:kubernetes.default.svc"). Internal when OpenSSL fails (it should
// not).
absl::StatusOr<TlsMaterial> GenerateTlsMaterial(const std::vector<std::string>& extra_sans = {});

}  // namespace phalanx::localcluster
