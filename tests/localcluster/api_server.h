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
#include <map>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/base/clock.h"
#include "tests/localcluster/fault_injector.h"
#include "tests/localcluster/https_server.h"
#include "tests/localcluster/resource_registry.h"
#include "tests/localcluster/store_types.h"

namespace phalanx::localcluster {

class ApiServer {
 public:
  struct Options {
    std::string token;    // required as "Authorization: Bearer <token>"
    std::string log_dir;  // where pod logs are (for pods/log)
    std::string address;  // host:port, for discovery documents
    absl::Duration bookmark_interval = absl::Seconds(1);
  };

  ApiServer(ObjectStore& store, ResourceRegistry& registry, base::Clock& clock, Options options);

  void set_fault_target(FaultTarget* target) { faults_.set_fault_target(target); }
  void set_address(std::string address) { options_.address = std::move(address); }

  // Fault injection (fault_injector.h): 429/500 for a share of requests; end every watch.
  void InjectErrors(double share, int code) { faults_.InjectErrors(share, code); }
  void DropWatches() { faults_.DropWatches(); }
  FaultInjector& faults() { return faults_; }
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
  // Resource verbs (api_objects.cc).
  void HandleResource(const HttpRequest& request, HttpResponse& response, const Target& target);
  void Get(const HttpRequest& request, HttpResponse& response, const Target& target);
  void List(const HttpRequest& request, HttpResponse& response, const Target& target);
  void Create(const HttpRequest& request, HttpResponse& response, const Target& target);
  // Create with warnings already collected (an apply patch that creates).
  void CreateWithWarnings(const HttpRequest& request, HttpResponse& response, const Target& target,
                          std::vector<std::string> warnings);
  void Update(const HttpRequest& request, HttpResponse& response, const Target& target);
  void Patch(const HttpRequest& request, HttpResponse& response, const Target& target);
  void Delete(const HttpRequest& request, HttpResponse& response, const Target& target);
  void PodLog(HttpResponse& response, const Target& target);
  // One write's request-level context for Admit: how to treat unknown fields, and the Warning
  // headers collected for the answer.
  struct WriteContext {
    std::string field_validation = "Warn";  // Strict | Warn | Ignore (kube-apiserver's default)
    bool patch = false;
    const web::json::value* current = nullptr;  // the stored object an update replaces
    std::vector<std::string> warnings;
  };
  static WriteContext ContextOf(const HttpRequest& request);
  // Defaults, validation and side effects (CRD registration) of a write, before it is stored.
  absl::Status Admit(const Target& target, web::json::value& object, bool create,
                     WriteContext& context, HttpResponse& response, bool* responded);
  void AfterWrite(const Target& target, const web::json::value& stored, bool deleted);
  // Streams watch events (api_watch.cc).
  void Watch(const HttpRequest& request, HttpResponse& response, const Target& target);

  // Like kube-apiserver's watch cache: a type's watch window opens when the server starts (built-in
  // kinds) or when its CRD is registered; watching from an older resourceVersion is 410 Expired.
  uint64_t WatchWindowStart(const std::string& store_key);

  ObjectStore& store_;
  ResourceRegistry& registry_;
  base::Clock& clock_;
  Options options_;
  uint64_t start_version_ = 0;
  absl::Mutex window_mu_;
  std::map<std::string, uint64_t> window_start_ ABSL_GUARDED_BY(window_mu_);
  FaultInjector faults_;
  std::atomic<int64_t> requests_{0};
};

void RespondJson(HttpResponse& response, int code, const web::json::value& body);
// The same with `Warning: 299 - "<text>"` headers, one per warning (joined by ", " in one header,
// which clients split as they do repeated headers). Each warning is also logged.
void RespondJson(HttpResponse& response, int code, const web::json::value& body,
                 const std::vector<std::string>& warnings);

}  // namespace phalanx::localcluster
