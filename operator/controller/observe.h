// What the reconciler sees of a job's world, reduced to the facts the policy needs (each task
// pod's index, incarnation, phase, exit code and disruption marks; the coordinator pod; failures
// the coordinator reported; nodes about to go away and when), and the pipeline's first stage,
// ObserveTasks, which sorts those pods into one record per task. Built from informer-cache
// objects; pure; thread-safe.
#pragma once

#include <cpprest/json.h>

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "common/base/incarnation.h"
#include "common/kube/node_preemption.h"

namespace phalanx::op {

using Json = web::json::value;
using base::Incarnation;

// status.phase of a Pod.
enum class PodPhase { kUnknown, kPending, kRunning, kSucceeded, kFailed };
PodPhase ParsePodPhase(const std::string& phase);  // "" or anything else: kUnknown

struct PodView {
  std::string name;
  std::string uid;
  int index = -1;                                  // task pods: phalanx.dev/task
  Incarnation incarnation = base::kNoIncarnation;  // task pods: phalanx.dev/incarnation
  PodPhase phase = PodPhase::kUnknown;
  std::string node;
  std::string ip;
  int grpc_port = 0;  // the first container's port named "grpc" (the coordinator's), if any
  // A coordinator pod started with --tls_cert_file: it serves TLS only, so the operator's link
  // must speak TLS to it (and cleartext to one started without, as before --coordinator_tls).
  bool serves_tls = false;
  bool being_deleted = false;
  bool ready = false;
  bool from_spare = false;  // labelled phalanx.dev/spare: a spare pod, or one that took a task over
  int spare_slot = -1;      // its phalanx.dev/spare label (a slot of spec.spares)
  int spare_generation = -1;       // its phalanx.dev/spare-generation label
  bool disruption_target = false;  // condition DisruptionTarget=True (eviction/preemption)
  // Its reason and message ("PreemptionByScheduler: ..."), for the Events that name the cause.
  std::string disruption;
  std::optional<int> exit_code;  // first container's terminated state
  std::string reason;            // its reason (Error, Completed, OOMKilled, ...)
  std::string message;           // more about it, for Events (the coordinator's words)
  // Its terminated state's finishedAt, when the kubelet gave one: when the task stopped, for
  // goodput (controller/accounting.h).
  std::optional<absl::Time> finished_at;
  // The first container's state.waiting, while it cannot start (InvalidImageName,
  // ImagePullBackOff, CreateContainerConfigError, ...): reason and message.
  std::string waiting_reason;
  std::string waiting_message;
  // metadata.creationTimestamp (absl::InfiniteFuture() when unknown): how long a pod has been
  // unable to start is measured from it.
  absl::Time created = absl::InfiniteFuture();
  // PodScheduled=False with reason Unschedulable: the scheduler found no node; its message
  // ("0/3 nodes are available: 3 Insufficient nvidia.com/gpu.") says why.
  bool unschedulable = false;
  std::string unschedulable_message;

  bool ended() const { return phase == PodPhase::kSucceeded || phase == PodPhase::kFailed; }
  // Neither ended nor going: a pod that runs (or will), holding its node's resources.
  bool live() const { return !being_deleted && !ended(); }
};

PodView ViewOfPod(const Json& pod);

// What the operator's pod cache keeps of a pod (the pod informer's transform): what ViewOfPod,
// the indexes and the handlers read — metadata without managedFields, spec.nodeName, each
// container's name and ports, and status. A task pod's spec (its environment, volumes,
// affinity, security context) is most of its size and is never read back: the operator only
// creates, patches and deletes pods, never writes a cached one whole. A reader of another spec
// field must keep it here.
void TrimCachedPod(Json& pod);
// Drops metadata.managedFields (server-side apply's bookkeeping, which a real API server adds to
// every object and the operator never reads): every informer's transform.
void DropManagedFields(Json& object);

// A task the coordinator declared failed (crash, hang or reported error) while its pod may still
// look Running.
struct CoordinatorFailure {
  Incarnation incarnation = 0;  // the incarnation it declared failed
  std::string reason;           // its words: "heartbeat timeout", "session broken: ..."
  // When the coordinator last heard from that incarnation (its last heartbeat for a hang, the
  // session's end for a crash); absl::InfinitePast() when it did not say. Goodput counts the
  // time from here to the operator's reaction as lost.
  absl::Time last_heard = absl::InfinitePast();
};

// The coordinator's total of the work the job's workers reported discarding when they rolled
// back to a checkpoint (ReportRolledBack), and which coordinator (its random id) counted it.
struct RolledBackReport {
  std::string coordinator_id;
  double seconds = 0;
};

// Whether the job's workers are training, as they told the coordinator (ReportStepping, on the
// coordinator's clock, since that coordinator started): runtime/coordination/stepping_tracker.h.
struct SteppingReport {
  std::optional<absl::Time> first_step;      // nullopt: no step reported yet
  std::optional<absl::Time> stepping_since;  // the last time stepping (re)started
  std::optional<absl::Time> regroup_since;   // the last regroup's start (a task's failure)
  bool regrouping = false;                   // since regroup_since, until a worker's report
  friend bool operator==(const SteppingReport&, const SteppingReport&) = default;
};

// A spare pod the coordinator gave a failed task to (runtime/coordination/spare_pool.h).
struct SpareTakeOver {
  int task = 0;
  Incarnation incarnation = 0;
  friend bool operator==(const SpareTakeOver&, const SpareTakeOver&) = default;
};

struct JobObservation {
  std::vector<PodView> task_pods;
  // Pods labelled role=spare (controller/spares.h): waiting to take a task over, or just did
  // (until relabelled as the task's pod).
  std::vector<PodView> spare_pods;
  // What the coordinator said of spares: pod name → the task it took over (ObserveTasks counts
  // such a pod as that task's, before its labels say so), and the pods waiting for a task.
  std::map<std::string, SpareTakeOver> spare_takeovers;
  std::set<std::string> spares_waiting;
  std::optional<PodView> coordinator;
  // The Secret and the NetworkPolicy are created with the coordinator pod, and the operator
  // never reads them back (it has no right to read Secrets: ADR 0003), so they count as present
  // while the coordinator pod exists.
  bool has_secret = false;
  bool has_network_policy = false;
  bool has_coordinator_service = false;
  bool has_tasks_service = false;
  // task index → what the coordinator reported about it.
  std::map<int, CoordinatorFailure> coordinator_failed;
  // pod index → the newest incarnation the coordinator has registered for its tasks.
  std::map<int, Incarnation> coordinator_incarnations;
  // With nprocPerNode > 1: pod index → its ranks' in-place restarts by phalanx-launch, as the
  // coordinator saw them register (rank r of pod incarnation I registers as I·stride + its
  // restarts), summed over the pod's ranks, for the newest pod incarnation seen.
  struct RankRestarts {
    Incarnation pod_incarnation = 0;
    int restarts = 0;
  };
  std::map<int, RankRestarts> rank_restarts;
  std::optional<RolledBackReport> rolled_back;  // nullopt: the coordinator has not answered
  SteppingReport stepping;                      // all unset until the coordinator answers
  // The operator's link to the coordinator has not had an answer from the job's current
  // coordinator pod, made with the job token the operator derived. Until it has, the coordinator
  // may be running with someone else's token (a Secret squatting its name): no task pod is
  // created (it would mount that Secret's credentials). False where the operator runs without a
  // link (it cannot tell).
  bool coordinator_unproven = false;
  // Nodes about to go away (termination/maintenance taints, or cordoned) → when, as the node
  // agent announced it (kube/node_preemption.h); absl::InfiniteFuture() when nobody said.
  std::map<std::string, absl::Time> preempting_nodes;
};

// True when a node carries a termination or maintenance taint or is cordoned (one list, shared
// with the node agent).
using kube::NodeIsBeingPreempted;

// The deadline the node agent wrote on a Node (annotation phalanx.dev/preemption-deadline);
// absl::InfiniteFuture() when there is none or it is not RFC 3339.
absl::Time NodePreemptionDeadline(const Json& node);

}  // namespace phalanx::op
