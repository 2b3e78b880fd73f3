// CliqueRegistry: the node's table of GPU cliques, as the training processes on it report them
// over the agent's Unix socket (clique_socket.h): which local GPUs each task's cliques use and
// their state, plus abort requests the agent raises for a task (a fatal error on one of its
// GPUs) that the task picks up on its next report. Feeds the agent's metrics. Thread-safe.
//
// Expiry: a report not refreshed within `ttl` is dropped by Expire(now) (the agent's tick calls
// it), so a task that died without FORGET does not stay in the table or the metrics for ever;
// clients re-report every clique well within the TTL (runtime/clique/job_cliques.h).
//
// Access: every (job, task) belongs to the key that first reported it. A caller proves it with
// `key`; a report, FORGET or LIST with another key is refused or sees nothing. What a key is
// depends on whether the agent can check tickets (`ticket_key`, the chart's default):
//  - **Tickets** (common/auth/clique_ticket.h): the key is the task's clique ticket, which the
//    operator issued into its pod only; the agent verifies it with its key and accepts it only
//    for the job name and task it names. The entries are then kept under the job's whole
//    identity from the ticket, "<namespace>/<name>/<uid>" (ClaimantJob), not the bare name a
//    report carries: jobs of one name in two namespaces, or a deleted job's zombie beside its
//    successor, never share a claim. Another pod — of another job, or of this job but another
//    task — can neither claim nor keep a task, and cannot see its entries or take its abort
//    requests. While the agent has no key yet (its Secret not written), every claim is refused.
//  - **Digests** (no `ticket_key`: a standalone agent, older clients): the key is a digest of the
//    caller's coordination credential, which the agent cannot verify but can compare, so a
//    process holding another credential can neither read nor overwrite a claimed task's entries;
//    but a local process that claims a (job, task) before the real task can keep its reports
//    out while it refreshes the claim.
// The claim is released when it expires (no refresh within `ttl`), on FORGET by its holder, or
// at once when the process that made it (its SO_PEERCRED pid, where the agent can see it) has
// exited: that is how a restarted task takes its entries back without waiting for the TTL. A pid
// that was reused only keeps the claim longer (until the TTL), never hands it to someone else.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/base/incarnation.h"

namespace phalanx::agent {

struct LocalClique {
  std::string job;
  int task = 0;
  base::Incarnation incarnation = 0;
  std::string clique;        // the client's clique id (its key's short form)
  std::string state;         // FORMING, READY, ABORTING, WAITING, SHRINKING, REFORMING, FAILED
  std::vector<int> devices;  // local GPU indexes
  absl::Time updated;
};

// Who is asking: the key the request carried, and the peer's pid from SO_PEERCRED (0 unknown:
// the peer is in a pid namespace the agent cannot see).
struct CliqueCaller {
  std::string key;
  int pid = 0;
};

struct CliqueRegistryOptions {
  absl::Duration ttl = absl::Seconds(30);
  // Whether process `pid` (> 0) still exists; default kill(pid, 0). Tests inject their own.
  std::function<bool(int pid)> process_alive;
  // The agent key clique tickets are verified with (a mounted Secret's file, read on each call
  // so a rotated or late key is picked up; an error while there is none). Unset: keys are
  // digests, compared but not verified (see above).
  std::function<absl::StatusOr<std::string>()> ticket_key;
};

class CliqueRegistry {
 public:
  CliqueRegistry() : CliqueRegistry(CliqueRegistryOptions{}) {}
  explicit CliqueRegistry(CliqueRegistryOptions options);

  // Records (or replaces) one clique of one task, at clique.updated. A report from a newer
  // incarnation of the task drops every clique of the older one. Errors: InvalidArgument (empty
  // job/clique/key, bad state); PermissionDenied when (job, task) is held by another key. With
  // `abort`, also takes the abort request pending for the task into it (as TakeAbortRequest,
  // "" if none): the socket answers a report with it, under the job the report was filed as.
  absl::Status Report(LocalClique clique, const CliqueCaller& caller, std::string* abort = nullptr);
  // The task's process is gone: forget its cliques (and its claim). PermissionDenied when
  // (job, task) is held by another key; OK when nothing is held.
  absl::Status Forget(const std::string& job, int task, const CliqueCaller& caller, absl::Time now);
  // Asks every task using local GPU `device` to abort its cliques; returns how many tasks.
  int RequestAbortForDevice(int device, const std::string& reason);
  // The abort reason pending for the task (cleared by this call), "" if none. `job` as the
  // registry keeps it (ClaimantJob).
  std::string TakeAbortRequest(const std::string& job, int task);
  // Drops the cliques and claims not refreshed within the TTL before `now`; returns how many
  // cliques went.
  int Expire(absl::Time now);

  // Every clique (the agent's own view, for metrics and tests).
  std::vector<LocalClique> List() const;
  // The cliques of the (job, task)s held by `key`.
  std::vector<LocalClique> ListFor(const std::string& key) const;
  std::map<std::string, int> CountByState() const;

 private:
  // The job whose task `key` may act for: with tickets, the ticket's "<ns>/<name>/<uid>" when it
  // is valid for `job` (its bare name, or that whole identity) and `task`, else PermissionDenied
  // saying why; without tickets `job` itself. Report and Forget key their entries by it.
  absl::StatusOr<std::string> ClaimantJob(const std::string& job, int task,
                                          const std::string& key) const;
  using Key = std::tuple<std::string, int, std::string>;  // job, task, clique
  using TaskKey = std::pair<std::string, int>;            // job, task
  struct Claim {
    std::string key;
    int pid = 0;
    absl::Time refreshed;
  };
  // OK when `caller` may act on `task` at `now`; PermissionDenied otherwise. Takes over a
  // released claim (dropping the old holder's cliques and abort request).
  absl::Status ClaimLocked(const TaskKey& task, const CliqueCaller& caller, absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void DropTaskLocked(const TaskKey& task) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const CliqueRegistryOptions options_;
  mutable absl::Mutex mu_;
  std::map<Key, LocalClique> cliques_ ABSL_GUARDED_BY(mu_);
  std::map<TaskKey, Claim> claims_ ABSL_GUARDED_BY(mu_);
  std::map<TaskKey, std::string> abort_requests_ ABSL_GUARDED_BY(mu_);
};

}  // namespace phalanx::agent
