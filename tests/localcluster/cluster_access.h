// ClusterAccess: what the local cluster's node side (the kubelet, kubelet.h, and the scheduler,
// scheduler.h) reads and writes, behind one seam so the same node code runs on both back ends:
//   - StoreAccess (here): straight onto the built-in back end's in-memory ObjectStore;
//   - RestAccess (rest_access.h): as an ordinary API client of a real kube-apiserver, with
//     watched caches of pods and nodes and writes through pods/status, pods/binding and
//     nodes/status, as a real kubelet and kube-scheduler do.
// Versions are the access's own change counter: Version() passes `since` whenever a pod or node
// changed, and PodEventsSince(since) lists the pod changes after it (OutOfRange: too old, list
// again). Implementations are thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/kube/object_filter.h"
#include "tests/localcluster/store_types.h"

namespace phalanx::localcluster {

class ClusterAccess {
 public:
  virtual ~ClusterAccess() = default;
  // Ends any background work (watches); reads still answer from what was seen. Idempotent.
  virtual void Stop() {}

  // Grows whenever a pod or node changes.
  virtual uint64_t Version() const = 0;
  // Blocks until Version() passes `since` or `max_wait` (real time) passes.
  virtual void WaitForChange(uint64_t since, absl::Duration max_wait) const = 0;
  // Pod changes after `since`, oldest first. OutOfRange when `since` is older than what is kept.
  virtual absl::StatusOr<std::vector<WatchEvent>> PodEventsSince(uint64_t since) const = 0;

  // Every pod or node ("pods", "nodes") matching `filter`, all namespaces; the result's
  // resource_version is a Version() the list is at least as new as.
  virtual absl::StatusOr<ListResult> List(const std::string& resource,
                                          const kube::ObjectFilter& filter) const = 0;
  // "pods", "nodes", "secrets", "leases". NotFound.
  virtual absl::StatusOr<Json> Get(const std::string& resource, const std::string& ns,
                                   const std::string& name) const = 0;
  // "nodes", "leases". AlreadyExists.
  virtual absl::StatusOr<Json> Create(const std::string& resource, const std::string& ns,
                                      const Json& object) = 0;
  // "pods", "nodes", "leases"; `status` writes the /status subresource. Aborted on a stale
  // resourceVersion, NotFound.
  virtual absl::StatusOr<Json> Update(const std::string& resource, const std::string& ns,
                                      const Json& object, bool status) = 0;
  // Deletes a pod: graceful when `grace` is unset or positive (the API server marks a running
  // pod), at once with grace 0. NotFound; FailedPrecondition when its uid is not `uid`.
  virtual absl::Status DeletePod(const std::string& ns, const std::string& name,
                                 const std::string& uid, std::optional<int64_t> grace) = 0;
  // Binds a pending pod to `node` (pods/binding: spec.nodeName and PodScheduled=True).
  // Aborted/AlreadyExists when it is already bound, NotFound when it is gone.
  virtual absl::StatusOr<Json> Bind(const Json& pod, const std::string& node) = 0;
};

// The built-in back end: the ObjectStore itself, in process.
class StoreAccess final : public ClusterAccess {
 public:
  // The store's name for a resource the node side names by plural.
  static std::string StoreKey(const std::string& resource) {
    return resource == "leases" ? "leases.coordination.k8s.io" : resource;
  }

  StoreAccess(ObjectStore& store, base::Clock& clock) : store_(store), clock_(clock) {}

  uint64_t Version() const override { return store_.resource_version(); }
  void WaitForChange(uint64_t since, absl::Duration max_wait) const override {
    store_.WaitForChange(since, max_wait);
  }
  absl::StatusOr<std::vector<WatchEvent>> PodEventsSince(uint64_t since) const override {
    return store_.EventsSince("pods", "", since);
  }
  absl::StatusOr<ListResult> List(const std::string& resource,
                                  const kube::ObjectFilter& filter) const override {
    return store_.List(resource, "", filter, 0, "");
  }
  absl::StatusOr<Json> Get(const std::string& resource, const std::string& ns,
                           const std::string& name) const override {
    return store_.Get(StoreKey(resource), ns, name);
  }
  absl::StatusOr<Json> Create(const std::string& resource, const std::string& ns,
                              const Json& object) override {
    return store_.Create(StoreKey(resource), ns, object);
  }
  absl::StatusOr<Json> Update(const std::string& resource, const std::string& ns,
                              const Json& object, bool status) override {
    return store_.Update(StoreKey(resource), ns, object, status);
  }
  absl::Status DeletePod(const std::string& ns, const std::string& name, const std::string& uid,
                         std::optional<int64_t> grace) override {
    return store_.Delete("pods", ns, name, uid, ObjectStore::Propagation::kBackground, grace)
        .status();
  }
  absl::StatusOr<Json> Bind(const Json& pod, const std::string& node) override;

 private:
  ObjectStore& store_;
  base::Clock& clock_;
};

}  // namespace phalanx::localcluster
