// RestAccess: the local cluster's node side (kubelet.h, scheduler.h) as an ordinary client of a
// real kube-apiserver, the way a kubelet and kube-scheduler are: pods and nodes are read from
// watched caches (kube::Informer), writes go to the API server — pod status through
// pods/status, binding through pods/binding, node status through nodes/status, deletion with
// the grace the kubelet chooses and a uid precondition. Secrets and Leases are read from the
// server itself.
//
// Change tracking for ClusterAccess: every pod or node delivery from the informers bumps a local
// counter (Version) and wakes WaitForChange; pod deliveries are kept as WatchEvents (the last
// `history_limit`) for PodEventsSince.
//
// Like kube-scheduler's "assume" cache, a pod bound here reads as bound (spec.nodeName) until
// the informer has seen the binding, so a scheduling pass right after a bind cannot count that
// pod's GPUs as free.
//
// Thread-safe.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "common/base/clock.h"
#include "common/kube/informer.h"
#include "common/kube/rest_client.h"
#include "tests/localcluster/cluster_access.h"

namespace phalanx::localcluster {

class RestAccess final : public ClusterAccess {
 public:
  // `client` must outlive this object.
  RestAccess(kube::RestClient& client, base::Clock& clock, size_t history_limit = 10000);
  ~RestAccess() override;  // Stop()
  RestAccess(const RestAccess&) = delete;
  RestAccess& operator=(const RestAccess&) = delete;

  // Starts the informers and waits up to `timeout` for their first lists. Unavailable when
  // they did not sync.
  absl::Status Start(absl::Duration timeout);
  void Stop() override;

  uint64_t Version() const override;
  void WaitForChange(uint64_t since, absl::Duration max_wait) const override;
  absl::StatusOr<std::vector<WatchEvent>> PodEventsSince(uint64_t since) const override;
  absl::StatusOr<ListResult> List(const std::string& resource,
                                  const kube::ObjectFilter& filter) const override;
  absl::StatusOr<Json> Get(const std::string& resource, const std::string& ns,
                           const std::string& name) const override;
  absl::StatusOr<Json> Create(const std::string& resource, const std::string& ns,
                              const Json& object) override;
  absl::StatusOr<Json> Update(const std::string& resource, const std::string& ns,
                              const Json& object, bool status) override;
  absl::Status DeletePod(const std::string& ns, const std::string& name, const std::string& uid,
                         std::optional<int64_t> grace) override;
  absl::StatusOr<Json> Bind(const Json& pod, const std::string& node) override;

 private:
  void Record(const std::string& type, const Json& object, bool is_pod);
  // The cached pod with an assumed binding applied.
  Json WithAssumedBinding(Json pod) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  kube::RestClient& client_;
  const size_t history_limit_;
  kube::Informer pods_;
  kube::Informer nodes_;

  mutable absl::Mutex mu_;
  uint64_t version_ ABSL_GUARDED_BY(mu_) = 1;
  std::deque<WatchEvent> history_ ABSL_GUARDED_BY(mu_);
  uint64_t oldest_retained_ ABSL_GUARDED_BY(mu_) = 1;  // events after this are all kept
  std::map<std::string, std::string> assumed_ ABSL_GUARDED_BY(mu_);  // pod uid → node
};

}  // namespace phalanx::localcluster
