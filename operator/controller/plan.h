// PlanReconcile: one reconcile pass as a pure function. Given the job, its decoded spec, the
// status written last time and what the cluster shows now, it returns what to create and delete,
// the status to write, the Events to record, the preemption notices to deliver and when to look
// again. The reconciler executes the plan; every policy decision (restart scope, maxRestarts,
// back-off, fatal vs retryable exit codes, preemption, success policy, suspend, goodput) is made
// by the named stages PlanReconcile runs in order (pass.h lists them), one policy per file, each
// table-tested on its own. Pure; thread-safe.
#pragma once

#include <string>
#include <vector>

#include "absl/time/time.h"
#include "operator/api/types.h"
#include "operator/controller/desired_state.h"
#include "operator/controller/observe.h"

namespace phalanx::op {

struct EventNote {
  bool warning = false;
  std::string reason;
  std::string message;

  friend bool operator==(const EventNote&, const EventNote&) = default;
};

// A task pod created in place of one that failed or was preempted (not a first creation).
struct Replacement {
  int task = 0;
  bool preemption = false;
  std::string reason;  // bounded: a pod reason, "Preempted" reasons below, "JobRestart", ...

  friend bool operator==(const Replacement&, const Replacement&) = default;
};

// A task whose node or pod is being preempted: its coordinator must open (or join) a checkpoint
// round that ends by `deadline`. `since` (when the operator first saw the preemption) tells one
// notice from the next: the reconciler delivers each (task, since) until the coordinator
// acknowledges it.
struct PreemptionNotice {
  int task = 0;
  absl::Time since;
  absl::Time deadline;

  friend bool operator==(const PreemptionNotice&, const PreemptionNotice&) = default;
};

// A spare pod that took `task` over becomes its pod: labels role=task, task, incarnation.
struct PodRelabel {
  std::string pod;
  int task = 0;
  Incarnation incarnation = 0;
  friend bool operator==(const PodRelabel&, const PodRelabel&) = default;
};

struct ReconcilePlan {
  std::vector<Json> create;               // in order: Secret, Services, coordinator, task pods
  std::vector<std::string> delete_pods;   // pod names (tasks, spares or the coordinator)
  std::vector<PodRelabel> relabel;        // spare pods that took a task over (spares.h)
  std::vector<Replacement> replacements;  // for metrics: restarts and preemptions by reason
  std::vector<double> recoveries;         // for metrics: recoveries that ended, in seconds
  TrainingJobStatus status;
  std::vector<EventNote> events;
  std::vector<PreemptionNotice> notices;  // for the coordinator, every pass while they last
  // Set while the coordinator refuses the token in the job's Secret (it last exited with
  // auth::kExitTokenMismatch and none runs since): a Secret the operator did not write holds the
  // name. Reported as a ChildConflict on the Secret like any squatted child; the operator may not
  // read Secrets to find out itself (ADR 0003).
  std::string secret_conflict;
  // Delete the TrainingJob itself (ttlSecondsAfterFinished passed: lifecycle.h); its children go
  // with it through their ownerReferences.
  bool delete_job = false;
  absl::Duration requeue_after = absl::ZeroDuration();  // zero: only on the next change
};

struct PlanInputs {
  const Json& job;
  const TrainingJobSpec& spec;
  const TrainingJobStatus& previous;
  const JobObservation& world;
  const CoordinatorPlacement& placement;
  std::string token;  // the job token (derived from the operator key; never read back)
  absl::Time now;
  const NetworkPolicyOptions* network_policy = nullptr;  // null: no NetworkPolicy
  int agent_clique_port = 0;  // > 0: task pods get the node agent's clique channel
  // The node agents' key (common/auth/clique_ticket.h): the job's Secret gets each task's clique
  // ticket. Empty: no tickets.
  std::string agent_clique_key = {};
  // With placement.tls, what the job's Secret gets for TLS when it is to be created (the
  // reconciler issues a coordinator certificate only for a pass that creates the Secret, so it
  // passes them only then, as the observation's !has_secret says); null otherwise.
  const JobTlsFiles* tls_files = nullptr;
};

ReconcilePlan PlanReconcile(const PlanInputs& in);

}  // namespace phalanx::op
