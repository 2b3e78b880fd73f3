// ApiProxy: the real back end's front door. Clients (kubectl, the operator, the agent, tests)
// reach a real kube-apiserver through it, so the faults a real API server cannot be asked for
// come from here, and the local cluster keeps one URL and one admin endpoint on both back ends:
//   - every request is forwarded as it came (method, request-target, Authorization, body) over
//     TLS to the API server, which authenticates, authorizes (RBAC), admits and answers it;
//     responses come back with their status, body and Warning headers; chunked (watch) answers
//     are relayed chunk by chunk;
//   - FaultInjector: a share of resource requests answered 429/500 before they reach the server,
//     every relayed watch ended on DropWatches, and `POST /admin/...` (admin token only);
//   - `GET .../pods/NAME/log`: the API server would ask the pod's kubelet, and the local
//     kubelet serves no kubelet API, so once the API server has authorized the request the
//     proxy answers from the pod's log file, as the built-in back end does.
// One thread per client connection (HttpsServer's), one upstream connection per request.
// Thread-safe.
#pragma once

#include <string>

#include "tests/localcluster/fault_injector.h"
#include "tests/localcluster/https_server.h"

namespace phalanx::localcluster {

class ApiProxy {
 public:
  struct Options {
    std::string upstream_address = "127.0.0.1";  // kube-apiserver's (an IPv4 address)
    int upstream_port = 0;
    std::string upstream_ca_pem;
    std::string admin_token;  // required for /admin
    // Pod logs of process nodes: <log_dir>/<namespace>_<pod>.log; empty: forwarded (real
    // kubelets serve their pods' logs to the API server).
    std::string log_dir;
  };

  explicit ApiProxy(Options options);
  ~ApiProxy();
  ApiProxy(const ApiProxy&) = delete;
  ApiProxy& operator=(const ApiProxy&) = delete;

  FaultInjector& faults() { return faults_; }

  // The HttpsServer handler.
  void Handle(const HttpRequest& request, HttpResponse& response);

 private:
  class Upstream;
  void Forward(const HttpRequest& request, HttpResponse& response);
  void PodLog(const HttpRequest& request, HttpResponse& response, const std::string& ns,
              const std::string& pod);

  Options options_;
  void* ssl_ctx_ = nullptr;  // SSL_CTX* verifying the API server against upstream_ca_pem
  FaultInjector faults_;
};

}  // namespace phalanx::localcluster
