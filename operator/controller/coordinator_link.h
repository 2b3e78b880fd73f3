// CoordinatorLink: the operator's channel to each running job's coordinator (DESIGN.md "How the
// parts talk"). Per job, one WatchJobState long poll learns which tasks the coordinator declared
// failed — a crash, a hang caught by heartbeats, a reported error — so the reconciler restarts
// them even while their pods still look Running; and preemption notices open a coordinated
// checkpoint round on the coordinator. Wake(key) is called (never under a lock) when a job's
// failed set changes.
//
// No thread per job, so the operator can hold thousands: each poll is an asynchronous call on
// gRPC's callback API, and a poll that fails waits out its back-off on one timer thread shared
// by every job, which waits on the injected Clock (so tests step the back-off with FakeClock).
// Per job:
//
//   Ensure ──► polling ──answer──► record failed set, Wake if it changed ──► polling (at once)
//                 │  ▲
//           fails │  │ back-off passed (1 s, doubling to 60 s; reset by an answer; the
//                 │  │ next poll asks for the state whatever its version)
//                 ▼  │
//               backing off
//
//   Forget (or Ensure with a new address/token/coordinator UID/TLS name): the poll is cancelled
//   and Forget returns once its callback has run; a new coordinator gets a fresh channel at once.
//
// TLS (docs/security.md "TLS by default"): a coordinator that serves TLS is verified against the
// operator CA's certificate (`tls_roots_pem`) as the name Ensure gives (the job's
// CoordinatorTlsServerName), whatever address the link dials (the pod IP).
//
// Thread-safe. Forget and the destructor must not be called from Wake.
#pragma once

#include <grpcpp/security/credentials.h>

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/base/clock.h"
#include "common/base/incarnation.h"
#include "operator/controller/observe.h"

namespace phalanx::op {

class CoordinatorLink {
 public:
  using Wake = std::function<void(const std::string& job_key)>;
  // `tls_roots_pem`: the CA certificates (PEM) that coordinators serving TLS are verified with.
  CoordinatorLink(base::Clock& clock, Wake wake, std::string tls_roots_pem = "");
  ~CoordinatorLink();  // Forget()s every job
  CoordinatorLink(const CoordinatorLink&) = delete;
  CoordinatorLink& operator=(const CoordinatorLink&) = delete;

  // Watches `key`'s coordinator at `address` with `token`; restarts the watch when either changes.
  // `coordinator` names the coordinator pod (its UID): a recreated coordinator gets a fresh
  // channel at once instead of waiting out the old one's reconnect back-off. With a
  // `tls_server_name` the channel speaks TLS and accepts only a certificate for that name chained
  // to the link's roots; "" is cleartext.
  void Ensure(const std::string& key, const std::string& address, const std::string& token,
              const std::string& coordinator, const std::string& tls_server_name = "");
  // Stops watching `key`: cancels its long poll and returns once the poll has ended.
  void Forget(const std::string& key);
  struct FailedTask {
    base::Incarnation incarnation = 0;
    std::string reason;  // the coordinator's words: "heartbeat timeout", "session broken: ..."
    // When the coordinator last heard from it (its clock; InfinitePast: it did not say).
    absl::Time last_heard = absl::InfinitePast();
    friend bool operator==(const FailedTask&, const FailedTask&) = default;
  };
  // task index → the incarnation the coordinator declared failed, and why (one snapshot).
  std::map<int, FailedTask> FailedTasks(const std::string& key);
  // task index → the newest incarnation the coordinator has registered for it (last snapshot):
  // the operator's next incarnation must be above it, or a registration it did not make (a
  // forged jump, a zombie) would make its replacement stale.
  std::map<int, base::Incarnation> RegisteredIncarnations(const std::string& key);
  struct RolledBack {
    std::string coordinator_id;  // the coordinator start that counted it
    double seconds = 0;          // the workers' reported rolled-back work, in total
    friend bool operator==(const RolledBack&, const RolledBack&) = default;
  };
  // The coordinator's last answer on the work rolled back (nullopt: no answer yet). A change
  // wakes the job, as a change of the failed set does.
  std::optional<RolledBack> RolledBackWork(const std::string& key);
  // The coordinator's last answer on whether the workers are training (all unset: no answer
  // yet, or no report). A change wakes the job.
  SteppingReport Stepping(const std::string& key);
  // The coordinator's last word on the job's spares (spec.spares): the pods waiting for a task,
  // and pod → the task it took over. A change wakes the job.
  struct Spares {
    std::set<std::string> waiting;
    std::map<std::string, SpareTakeOver> takeovers;
    friend bool operator==(const Spares&, const Spares&) = default;
  };
  Spares SparesOf(const std::string& key);
  // Opens (or joins) a preemption round for `tasks` that must checkpoint before `deadline`.
  // Blocks up to 5 s. Unavailable when `key` is not watched or the coordinator did not answer.
  absl::Status NotifyPreemption(const std::string& key, const std::vector<int>& tasks,
                                absl::Time deadline, const std::string& reason);

 private:
  struct Watch;
  struct Poll;

  // Takes `it` out of watches_ (and any back-off) and marks it retired.
  std::unique_ptr<Watch> DetachLocked(std::map<std::string, std::unique_ptr<Watch>>::iterator it)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Cancels the polls of detached watches and waits until nothing holds them (then the caller
  // may delete them).
  void Retire(const std::vector<Watch*>& watches);
  // Starts `watch`'s next long poll, taking over one of the caller's holds on it.
  void StartPoll(Watch* watch);
  // `error` is "" for an answer, else what went wrong.
  void OnPollDone(Watch* watch, const std::string& error);
  // The timer thread: restarts each poll whose back-off has passed on the clock.
  void RetryLoop();

  base::Clock& clock_;
  const Wake wake_;
  const std::string tls_roots_pem_;
  const std::shared_ptr<grpc::ChannelCredentials> tls_credentials_;  // null without roots
  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::map<std::string, std::unique_ptr<Watch>> watches_ ABSL_GUARDED_BY(mu_);
  // Polls waiting out a back-off, by when they may retry.
  std::set<std::pair<absl::Time, Watch*>> backing_off_ ABSL_GUARDED_BY(mu_);
  // The back-off end RetryLoop is waiting on the clock for; a change of the earliest wakes it.
  absl::Time retry_wait_until_ ABSL_GUARDED_BY(mu_) = absl::InfiniteFuture();
  std::thread retry_thread_;
};

}  // namespace phalanx::op
