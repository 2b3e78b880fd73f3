// FaultInjector: the local cluster's fault injection, shared by both back ends' front doors (the
// built-in ApiServer and the ApiProxy in front of a real kube-apiserver):
//   - a deterministic share of resource requests answered 429 or 500 (InjectedError);
//   - dropping every open watch stream (an epoch that streaming handlers compare);
//   - the admin endpoint (`POST /admin/...`, HandleAdmin) that sets those two and forwards pod
//     and node faults to a FaultTarget (the kubelet).
// Thread-safe.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "tests/localcluster/https_server.h"

namespace phalanx::localcluster {

// Pod and node faults the admin endpoint forwards (implemented by the kubelet).
class FaultTarget {
 public:
  virtual ~FaultTarget() = default;
  virtual absl::Status KillPod(const std::string& ns, const std::string& name, int signal) = 0;
  virtual absl::Status StopPod(const std::string& ns, const std::string& name) = 0;
  virtual absl::Status ContinuePod(const std::string& ns, const std::string& name) = 0;
  virtual absl::Status FailPod(const std::string& ns, const std::string& name, int exit_code) = 0;
  virtual absl::Status PreemptNode(const std::string& node, absl::Duration grace) = 0;
  virtual absl::Status SetNodeReady(const std::string& node, bool ready) = 0;
};

class FaultInjector {
 public:
  void set_fault_target(FaultTarget* target) { faults_ = target; }

  // Answer `share` (0..1) of resource requests with `code` (429 or 500).
  void InjectErrors(double share, int code);
  // Ends every open watch stream (clients must re-watch from their last resourceVersion).
  void DropWatches() { watch_epoch_.fetch_add(1); }
  // Streams end once this differs from the value they started with.
  uint64_t watch_epoch() const { return watch_epoch_.load(); }

  // True when this request is one of the injected share; the error has then been written.
  bool InjectedError(HttpResponse& response);
  // Serves `POST /admin/...` (request.path starts with /admin/).
  void HandleAdmin(const HttpRequest& request, HttpResponse& response);

 private:
  FaultTarget* faults_ = nullptr;
  std::atomic<uint64_t> watch_epoch_{0};
  absl::Mutex mu_;
  double error_share_ ABSL_GUARDED_BY(mu_) = 0;
  int error_code_ ABSL_GUARDED_BY(mu_) = 500;
  double error_credit_ ABSL_GUARDED_BY(mu_) = 0;
};

// Writes a Kubernetes Status error for `status` (code, reason and message mapped as kube-apiserver
// does: NotFound 404, AlreadyExists 409, Aborted 409 Conflict, OutOfRange 410 Expired, ...).
void RespondError(HttpResponse& response, const absl::Status& status);

}  // namespace phalanx::localcluster
