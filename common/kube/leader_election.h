// LeaderElector: Lease-based leader election (client-go's leaderelection with a
// coordination.k8s.io/v1 Lease lock), so that of several operator replicas exactly one runs
// its controllers.
//
//   candidate ──TryAcquireOrRenew ok──► leader ──renew fails for renew_deadline──► candidate
//       ▲  (every retry_period)            │ (renews every retry_period)
//       │                                  └── Stop(): on_stopped_leading, release the lease
//       └── lease held by another and not expired (on OUR clock) → stay candidate
//
// Expiry is judged as client-go does: from when this process last saw the lease record change
// (observed time on the injected Clock) plus the record's leaseDurationSeconds, so clock skew
// between hosts does not matter. A write uses the lease's resourceVersion (optimistic
// concurrency): a 409 means another candidate won this round.
//
// Callbacks run on the elector's thread without any lock held and must return promptly (start
// or stop work elsewhere). Thread-safety: every public method is thread-safe.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/base/clock.h"
#include "common/kube/client.h"
#include "common/kube/object_meta.h"
#include "common/kube/resources.h"

namespace phalanx::kube {

inline const Resource& kLeaseResource = kLeases;

// A Lease's spec, as leader election reads and writes it.
struct LeaderElectionRecord {
  std::string holder_identity;
  int64_t lease_duration_seconds = 0;
  std::optional<absl::Time> acquire_time;
  std::optional<absl::Time> renew_time;
  int64_t lease_transitions = 0;

  static LeaderElectionRecord FromLease(const Json& lease);
  // Writes this record as `lease`'s spec (other fields of the lease stay).
  void EncodeInto(Json& lease) const;
};

// MicroTime: RFC 3339 with microseconds, "2026-11-22T05:00:00.000000Z".
std::string FormatMicroTime(absl::Time t);

class LeaderElector {
 public:
  struct Options {
    std::string lease_name;
    std::string lease_namespace;
    std::string identity;  // unique per candidate, e.g. the pod name
    absl::Duration lease_duration = absl::Seconds(15);
    absl::Duration renew_deadline = absl::Seconds(10);
    absl::Duration retry_period = absl::Seconds(2);
    // Written on the Lease when this candidate creates it, so that deleting the owner (e.g. the
    // Helm release's ServiceAccount) lets the garbage collector remove the Lease too.
    std::vector<OwnerReference> owner_references;
  };

  // InvalidArgument for missing names or durations that violate
  // lease_duration > renew_deadline > retry_period > 0 (what to fix is in the message).
  static absl::Status Validate(const Options& options);
  static absl::StatusOr<std::unique_ptr<LeaderElector>> Create(Client& client, base::Clock& clock,
                                                               Options options);
  LeaderElector(Client& client, base::Clock& clock, Options options);  // options pre-validated
  ~LeaderElector();                                                    // Stop()
  LeaderElector(const LeaderElector&) = delete;
  LeaderElector& operator=(const LeaderElector&) = delete;

  // One round: true if we hold the lease afterwards; false if another holds an unexpired lease
  // or won a write race (409). Other API errors (Unavailable, PermissionDenied, ...) are
  // returned. Updates IsLeader() from the outcome only on success of the write.
  absl::StatusOr<bool> TryAcquireOrRenew();

  // Starts the election loop on a background thread; on_started_leading when the lease is
  // acquired, on_stopped_leading when it is lost (no successful renewal for renew_deadline)
  // or at Stop(). After a loss it becomes a candidate again. Call at most once.
  void Run(std::function<void()> on_started_leading, std::function<void()> on_stopped_leading);

  // Whether we are leading: the last record we wrote or saw names us.
  bool IsLeader() const;
  // The holder of the lease as last observed ("" if none or unknown).
  std::string ObservedHolder() const;

  // Ends the loop; if leading, calls on_stopped_leading and then releases the lease (holder
  // "", leaseTransitions kept) so a successor can take over at once. Idempotent.
  void Stop();
  // Releases the lease if we hold it (what Stop() does after the loop ends). Returns API
  // errors; OK if we do not hold it.
  absl::Status Release();

 private:
  void Loop();
  // Waits `d` of real time or until Stop(); false once stopping.
  bool SleepUnlessStopped(absl::Duration d);
  Json NewLease(const LeaderElectionRecord& record) const;

  Client& client_;
  base::Clock& clock_;
  const Options options_;
  std::function<void()> on_started_leading_;  // set by Run() before the thread starts
  std::function<void()> on_stopped_leading_;

  mutable absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool leading_ ABSL_GUARDED_BY(mu_) = false;  // callbacks' view: started and not stopped
  LeaderElectionRecord observed_record_ ABSL_GUARDED_BY(mu_);
  Json observed_spec_ ABSL_GUARDED_BY(mu_);
  absl::Time observed_time_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  absl::Time last_renew_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();

  absl::Mutex run_mu_;  // serialises Run() and Stop()
  std::thread thread_ ABSL_GUARDED_BY(run_mu_);
};

}  // namespace phalanx::kube
