// Reconciler: the one class of the operator that talks to the API server. Reconcile(key) reads
// the job and its children from the informer caches (decoding the job's status once), asks
// PlanReconcile (the pipeline of policy stages, pass.h) what to do, does it
// (deletes, then creates; NotFound is fine, AlreadyExists only for a child this job controls:
// anything else of that name is a conflict, never adopted), writes status through /status
// (a 409 requeues quietly), records the plan's Events, and returns the plan's requeue. Invalid
// specs that slipped past the CRD, and children the API server refuses, show on the job
// (conditions, Events, phase Blocked: blocked.h), never only in the log, and never a crash.
// Thread-safe: the controller runs one Reconcile per key at a time, several keys in parallel.
#pragma once

#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/base/clock.h"
#include "common/kube/client.h"
#include "common/kube/controller.h"
#include "common/kube/event_recorder.h"
#include "common/kube/informer.h"
#include "common/kube/resources.h"
#include "operator/controller/blocked.h"
#include "operator/controller/coordinator_link.h"
#include "operator/controller/coordinator_ports.h"
#include "operator/controller/desired_state.h"
#include "operator/controller/metrics.h"
#include "operator/controller/notice_ledger.h"
#include "operator/controller/own_status_writes.h"
#include "operator/controller/plan.h"
#include "operator/controller/task_credentials.h"

namespace phalanx::op {

inline const kube::Resource kTrainingJobs{kGroup, kVersion, kPlural, true};
using kube::kNetworkPolicies;
using kube::kNodes;
using kube::kPods;
using kube::kSecrets;
using kube::kServices;

struct ReconcilerOptions {
  // placement.tls: TLS between every job's pods and its coordinator, with certificates of
  // coordinator_ca (docs/security.md "TLS by default").
  CoordinatorPlacement placement;
  // The operator's CA (operator_ca.h); required with placement.tls. A coordinator certificate it
  // signs goes into each job's Secret when the Secret is written, and the link verifies
  // coordinators with its certificate.
  auth::TlsKeyPair coordinator_ca;
  // Give each job's coordinator its own port in [base, base + span) (from the job's UID's hash,
  // probing past ports other jobs' coordinator pods hold) instead of placement.port: needed
  // where pods share one network namespace (the local cluster). 0: every coordinator uses
  // placement.port.
  int coordinator_port_base = 0;
  int coordinator_port_span = 2000;
  // The key every job token is derived from (common/auth/credentials.h; operator/token_key.h).
  std::string operator_key;
  // The per-job NetworkPolicy in front of the coordinator; nullopt: none is created.
  std::optional<NetworkPolicyOptions> network_policy = NetworkPolicyOptions{};
  // The node agent's clique channel port on every node (its --clique_listen; docs/adr/0004),
  // wired into task pods as PHALANX_CLIQUE_ADDRESS; 0: no agent channel.
  int agent_clique_port = 0;
  // Task pods only once the coordinator answered the link with the job's token (observe.h
  // coordinator_unproven); off only where coordinators are simulated.
  bool task_pods_wait_for_coordinator = true;
};

struct Informers {
  kube::Informer& jobs;
  kube::Informer& pods;      // label selector phalanx.dev/job
  kube::Informer& services;  // label selector phalanx.dev/job
  kube::Informer& nodes;
};

class Reconciler {
 public:
  // `link` (may be null: no coordinator channel) learns coordinator-declared failures and
  // carries preemption notices.
  Reconciler(kube::Client& client, Informers informers, kube::EventRecorder& events,
             base::Clock& clock, OperatorMetrics* metrics, ReconcilerOptions options,
             CoordinatorLink* link = nullptr);

  absl::StatusOr<kube::Controller::Result> Reconcile(const std::string& key);

 private:
  // What the informer caches hold of `job`'s children and their nodes (observe.h).
  JobObservation ObserveChildren(const Json& job) const;
  // Deletes, then creates; returns what the API server refused (NotFound on delete is fine;
  // AlreadyExists on create only for an object this job controls, else it is a conflict).
  std::vector<ChildFailure> Execute(const Json& job, const TrainingJobSpec& spec,
                                    const ReconcilePlan& plan);
  // Writes task pod `pod`'s own Secret of credentials bound to its incarnation
  // (task_credentials.h); AlreadyExists is success. An error is returned for the pass to retry.
  absl::Status WriteTaskCredential(const Json& job, const TrainingJobSpec& spec,
                                   const TaskPodRef& pod);
  // Writes it for each task pod of `world` that has not started and whose Secret this process
  // has not written: after a restart of the operator between a pod's create and its Secret's.
  absl::Status CatchUpTaskCredentials(const Json& job, const TrainingJobSpec& spec,
                                      const JobObservation& world);
  // Writes `status` through /status unless it equals `stored` (the job's status, decoded once
  // per pass); returns the job as now stored (`job` itself when nothing was written), whose
  // resourceVersion a second write needs.
  absl::StatusOr<Json> WriteStatus(const Json& job, const TrainingJobStatus& stored,
                                   const TrainingJobStatus& status);
  void RecordEvents(const Json& job, const std::vector<EventNote>& events);
  // Writes the InvalidSpec condition (phase Blocked) for `problems` and its Event.
  // Deletes the finished `job` (ttlSecondsAfterFinished passed), this uid only; its children go
  // through their ownerReferences.
  absl::Status DeleteFinishedJob(const Json& job);
  absl::Status ReportInvalidSpec(const Json& job, const TrainingJobStatus& stored,
                                 const std::vector<std::string>& problems);
  // Points the coordinator link at the job's running coordinator pod (if one runs and can be
  // reached) and folds what the link reports (tasks it declared failed, rolled-back work) into
  // `world`; returns that pod's UID, or "" when the link talks to none.
  std::string LinkCoordinator(const std::string& key, const Json& job, const TrainingJobSpec& spec,
                              const CoordinatorPlacement& placement, JobObservation& world);
  // A finished pass's counters: replacements (restarts, preemptions) and the pass itself.
  // The pass's restarts and preemptions; the pass itself is counted by kube::Controller.
  void RecordReplacements(const ReconcilePlan& plan, bool executed, absl::Duration since_observed);
  // Where `job` (`key`)'s coordinator listens: options_.placement, or in port-hash mode
  // (coordinator_port_base) the port of its coordinator pod, else one from ports_.
  CoordinatorPlacement PlacementFor(const std::string& key, const Json& job,
                                    const JobObservation& world);
  // For a job that uses TLS (children.h JobUsesTls: its recorded decision in `stored`, else
  // placement.tls) and a pass that is to create the job's Secret (`world` has none): the
  // files it gets, with a coordinator certificate issued for it now. nullopt otherwise; an
  // error when the certificate could not be issued.
  absl::StatusOr<std::optional<JobTlsFiles>> TlsFilesFor(const Json& job,
                                                         const TrainingJobStatus& stored,
                                                         const CoordinatorPlacement& placement,
                                                         const JobObservation& world, bool active);
  // The job's token, derived from the operator key: never read from the job's Secret.
  std::string TokenOf(const std::string& ns, const std::string& job, const std::string& uid) const;
  // After a create answered AlreadyExists: OK when the object of that name is controlled by the
  // job `uid` (ours; the cache lagged); AlreadyExists naming its controller when it is anyone
  // else's (never adopted); Unavailable when it vanished or could not be read (retry).
  absl::Status CheckControlled(const kube::Resource& r, const std::string& ns,
                               const std::string& name, const std::string& uid);

  // Delivers to the coordinator pod `coordinator` (its UID; "" when none runs) every notice of
  // the plan (preemption_policy.h PreemptionNotices) it has not acknowledged yet, as one round
  // ending at the earliest of their deadlines, and adds a CheckpointRoundOpened Event to
  // `events` once it accepted; false if one must be retried. Level-triggered: after a failed
  // delivery, on a new operator leader, and for a new coordinator pod (a restarted coordinator
  // has lost its rounds) every open notice goes out again (the coordinator folds a repeat into
  // its open round). A notice names a pod; the round names its `nproc_per_node` tasks.
  bool DeliverPreemptionNotices(const std::string& key, const std::string& coordinator,
                                int nproc_per_node, const std::vector<PreemptionNotice>& notices,
                                std::vector<EventNote>& events);

  kube::Client& client_;
  Informers informers_;
  kube::EventRecorder& events_;
  base::Clock& clock_;
  OperatorMetrics* metrics_;
  const ReconcilerOptions options_;
  // Derived from options_.operator_key when task pods get the agent's clique channel, else "".
  const std::string agent_clique_key_;
  CoordinatorLink* const link_;
  // Port-hash mode only (coordinator_port_base > 0).
  std::optional<CoordinatorPortLedger> ports_;
  NoticeLedger notices_;
  // The jobs whose cache lags this operator's own status write (a pass then waits for it).
  OwnStatusWrites own_writes_;
  // UIDs of the not-yet-started task pods whose credential Secret this process wrote (or found):
  // a pod leaves when it is seen started.
  absl::Mutex credentials_mu_;
  absl::flat_hash_set<std::string> credentials_written_ ABSL_GUARDED_BY(credentials_mu_);
};

}  // namespace phalanx::op
