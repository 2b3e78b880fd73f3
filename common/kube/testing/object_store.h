// ObjectStore: the local cluster's in-memory API storage (the part of kube-apiserver + etcd the
// operator and agent depend on), with the semantics controllers rely on:
//   - one monotonically increasing resourceVersion for every write, returned on objects/lists;
//   - optimistic concurrency: an update naming an older resourceVersion is a conflict (Aborted,
//     served as 409); Create of an existing name is AlreadyExists (409);
//   - metadata.generation starts at 1 and bumps only when `spec` changes;
//   - resources with a status subresource: a main update keeps the stored status, a status
//     update keeps everything but status;
//   - deletion with finalizers only sets deletionTimestamp; removing the last finalizer of an
//     object being deleted deletes it;
//   - graceful pod deletion: a pod bound to a node and not finished is only marked
//     (deletionTimestamp = now + grace, deletionGracePeriodSeconds = grace) so its kubelet can
//     stop it; the kubelet's later Delete with grace 0 removes it;
//   - a bounded history of watch events; asking for events older than it is OutOfRange (410);
//   - owner-reference garbage collection: CollectGarbage() deletes dependents whose owners are
//     all gone (background deletion), finishes foreground deletions (an owner carrying the
//     foregroundDeletion finalizer goes once no dependent remains), and Delete with the Orphan
//     policy strips the owner reference from dependents.
// Objects are JSON (cpprestsdk). Thread-safe; WaitForEvents blocks on real time with a bound.
#pragma once

#include <cpprest/json.h>

#include <algorithm>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/base/clock.h"
#include "common/kube/json.h"
#include "common/kube/object_filter.h"

namespace phalanx::kube::fake {

using kube::Json;

struct WatchEvent {
  std::string type;  // ADDED, MODIFIED, DELETED
  std::string resource;
  std::string ns;
  uint64_t resource_version = 0;
  Json object;
};

// The first event of `history` (kept in resource-version order) newer than `since`. Watchers ask
// what is new many times a second: scanning the whole kept history each time (50,000 events in
// the local cluster) made the simulated cluster's cost O(changes × history), its CPU the limit
// of the operator's 1,000-job bench (issue 33).
inline std::deque<WatchEvent>::const_iterator FirstEventAfter(const std::deque<WatchEvent>& history,
                                                              uint64_t since) {
  return std::upper_bound(
      history.begin(), history.end(), since,
      [](uint64_t version, const WatchEvent& e) { return version < e.resource_version; });
}

struct ListResult {
  std::vector<Json> items;
  uint64_t resource_version = 0;
  std::string continue_token;  // empty: no more pages
};

class ObjectStore {
 public:
  // `resource` strings name a kind's plural with its group: "pods", "trainingjobs.phalanx.dev".
  // Cluster-scoped objects use ns "".
  explicit ObjectStore(base::Clock& clock, size_t history_limit = 10000);

  void EnableStatusSubresource(const std::string& resource);

  // AlreadyExists, InvalidArgument (no metadata.name / not an object).
  // With a status subresource the object's status is dropped (clients cannot set it on create)
  // unless `keep_status`: the API server's own initial status (a pod's Pending phase).
  absl::StatusOr<Json> Create(const std::string& resource, const std::string& ns, Json object,
                              bool keep_status = false);
  // NotFound.
  absl::StatusOr<Json> Get(const std::string& resource, const std::string& ns,
                           const std::string& name) const;
  // ns "" lists every namespace. `limit` 0: no paging. InvalidArgument for a bad token.
  absl::StatusOr<ListResult> List(const std::string& resource, const std::string& ns,
                                  const kube::ObjectFilter& filter, int64_t limit,
                                  const std::string& continue_token) const;
  // NotFound, Aborted (resourceVersion conflict), InvalidArgument.
  absl::StatusOr<Json> Update(const std::string& resource, const std::string& ns, Json object,
                              bool status_subresource);
  enum class Propagation { kBackground, kForeground, kOrphan };
  // Returns the object as deleted, or as marked for deletion when it has finalizers or is a
  // pod in graceful deletion. `grace_period_seconds` matters for pods only, as in Kubernetes:
  // a pod with spec.nodeName set whose status.phase is neither Succeeded nor Failed, deleted
  // with a grace > 0 (unset: spec.terminationGracePeriodSeconds, else 30), is only marked with
  // deletionTimestamp = now + grace and deletionGracePeriodSeconds = grace (a MODIFIED event);
  // deleting it again with a shorter grace brings the deadline forward, and grace 0 (what the
  // kubelet sends once the containers are gone) removes it, finalizers permitting. Unbound
  // and finished pods and every other resource go at once.
  // NotFound; FailedPrecondition when `uid_precondition` is set and differs.
  absl::StatusOr<Json> Delete(const std::string& resource, const std::string& ns,
                              const std::string& name, const std::string& uid_precondition = "",
                              Propagation propagation = Propagation::kBackground,
                              std::optional<int64_t> grace_period_seconds = std::nullopt);
  // One garbage-collection pass (the local cluster runs it periodically); returns how many
  // objects it deleted or finished deleting.
  int CollectGarbage();

  // Events for `resource` (and `ns`, "" = all) with resourceVersion > since. OutOfRange when
  // `since` is older than the retained history (the client must relist).
  absl::StatusOr<std::vector<WatchEvent>> EventsSince(const std::string& resource,
                                                      const std::string& ns, uint64_t since) const;
  // Blocks until the store's resourceVersion passes `since` or `max_wait` passes.
  void WaitForChange(uint64_t since, absl::Duration max_wait) const;
  uint64_t resource_version() const;

 private:
  using Key = std::tuple<std::string, std::string, std::string>;  // resource, ns, name

  uint64_t NextVersionLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RecordLocked(const std::string& type, const std::string& resource, const std::string& ns,
                    const Json& object) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Deletes (or marks, with finalizers) the object at `it`; returns the resulting object.
  Json DeleteLocked(std::map<Key, Json>::iterator it) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Graceful pod deletion: marks the pod at `it` and returns it when the grace applies (see
  // Delete); nullopt when the object should be deleted now.
  std::optional<Json> MarkGracefulLocked(std::map<Key, Json>::iterator it,
                                         std::optional<int64_t> grace_period_seconds)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  base::Clock& clock_;
  const size_t history_limit_;
  mutable absl::Mutex mu_;
  uint64_t version_ ABSL_GUARDED_BY(mu_) = 1;
  uint64_t next_uid_ ABSL_GUARDED_BY(mu_) = 1;
  std::map<Key, Json> objects_ ABSL_GUARDED_BY(mu_);
  std::set<std::string> status_resources_ ABSL_GUARDED_BY(mu_);
  std::deque<WatchEvent> history_ ABSL_GUARDED_BY(mu_);
  uint64_t oldest_retained_ ABSL_GUARDED_BY(mu_) = 0;  // events after this are all retained
};

}  // namespace phalanx::kube::fake
