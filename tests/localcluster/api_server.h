// ApiServer: the local cluster's Kubernetes REST front end. It maps API paths onto the
// ObjectStore with the semantics controllers and kubectl rely on: discovery, get/list (label and
// field selectors, paging, server-side Tables for kubectl), create (generateName, defaults,
// namespace checks, CRD schema validation → 422), update and /status, merge / strategic-merge /
// apply patches, delete (propagation, preconditions, graceful pod deletion), watch (from a
// resourceVersion, bookmarks, timeoutSeconds, 410 as an in-stream ERROR event), bearer-token auth,
// and fault injection (a share of requests answered 429/500, dropping every open watch, plus the
// node and pod faults of a FaultTarget). Thread-safe; each connection runs on its own thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/base/clock.h"
#include "tests/localcluster/https_server.h"
#include "tests/localcluster/object_store.h"
#include "tests/localcluster/resource_registry.h"

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

class ApiServer {
 public:
  struct Options {
    std::string token;         // required as "Authorization: Bearer <token>"
    std::string log_dir;       // where pod logs are (for pods/log)
    std::string address;       // host:port, for discovery documents
    absl::Duration bookmark_interval = absl::Seconds(1);
  };

  ApiServer(ObjectStore& store, ResourceRegistry& registry, base::Clock& clock, Options options);

  void set_fault_target(FaultTarget* target) { faults_ = target; }
  void set_address(std::string address) { options_.address = std::move(address); }

  // Fault injection: answer `share` (0..1) of resource requests with `code` (429 or 500).
  void InjectErrors(double share, int code);
  // Ends every open watch stream (clients must re-watch from their last resourceVersion).
  void DropWatches();
  int64_t requests() const { return requests_.load(); }

  // The HttpsServer handler.
  void Handle(const HttpRequest& request, HttpResponse& response);

 private:
  // A parsed resource path: /api/v1/namespaces/NS/PLURAL/NAME/SUB or /apis/G/V/...
  struct Target {
    ResourceType type;
    std::string ns;    // "" for cluster-scoped types and all-namespace lists
    std::string name;  // "" for a collection
    std::string subresource;
  };

  void Dispatch(const HttpRequest& request, HttpResponse& response);
  bool InjectedError(HttpResponse& response);
  void HandleAdmin(const HttpRequest& request, HttpResponse& response);
  // Resource verbs (api_objects.cc).
  void HandleResource(const HttpRequest& request, HttpResponse& response, const Target& target);
  void Get(const HttpRequest& request, HttpResponse& response, const Target& target);
  void List(const HttpRequest& request, HttpResponse& response, const Target& target);
  void Create(const HttpRequest& request, HttpResponse& response, const Target& target);
  void Update(const HttpRequest& request, HttpResponse& response, const Target& target);
  void Patch(const HttpRequest& request, HttpResponse& response, const Target& target);
  void Delete(const HttpRequest& request, HttpResponse& response, const Target& target);
  void PodLog(HttpResponse& response, const Target& target);
  // Defaults, validation and side effects (CRD registration) of a write, before it is stored.
  absl::Status Admit(const Target& target, web::json::value& object, bool create,
                     HttpResponse& response, bool* responded);
  void AfterWrite(const Target& target, const web::json::value& stored, bool deleted);
  // Streams watch events (api_watch.cc).
  void Watch(const HttpRequest& request, HttpResponse& response, const Target& target);

  ObjectStore& store_;
  ResourceRegistry& registry_;
  base::Clock& clock_;
  Options options_;
  FaultTarget* faults_ = nullptr;
  std::atomic<uint64_t> watch_epoch_{0};
  std::atomic<int64_t> requests_{0};
  absl::Mutex mu_;
  double error_share_ ABSL_GUARDED_BY(mu_) = 0;
  int error_code_ ABSL_GUARDED_BY(mu_) = 500;
  double error_credit_ ABSL_GUARDED_BY(mu_) = 0;
};

// Writes a Kubernetes Status error for `status` (code, reason and message mapped as kube-apiserver
// does: NotFound 404, AlreadyExists 409, Aborted 409 Conflict, OutOfRange 410 Expired, ...).
void RespondError(HttpResponse& response, const absl::Status& status);
void RespondJson(HttpResponse& response, int code, const web::json::value& body);

}  // namespace phalanx::localcluster
