// The TrainingJob resource (phalanx.dev/v1alpha1) as C++ types: the spec the user writes and the
// status the operator reports. DESIGN.md "The TrainingJob resource" is the reference; the CRD in
// crds/ is its OpenAPI form (kept in step by codec tests). Durations in the spec are integer
// seconds (`...Seconds` fields), as Kubernetes APIs write them. Plain data; thread-compatible.
#pragma once

#include <cpprest/json.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "common/base/incarnation.h"

namespace phalanx::op {

using Json = web::json::value;

inline constexpr char kGroup[] = "phalanx.dev";
inline constexpr char kVersion[] = "v1alpha1";
inline constexpr char kKind[] = "TrainingJob";
inline constexpr char kPlural[] = "trainingjobs";

enum class RestartScope { kTask, kJob };
enum class SuccessPolicy { kAllTasks, kTaskZero };

struct BackoffSpec {
  absl::Duration base = absl::Seconds(10);
  absl::Duration max = absl::Minutes(5);

  bool operator==(const BackoffSpec&) const = default;
};

struct FailurePolicy {
  RestartScope restart_scope = RestartScope::kTask;
  int max_restarts = 3;
  BackoffSpec backoff;
  // A container exit code in `fatal_exit_codes` fails the job at once; otherwise a failure is
  // retryable unless `retryable_exit_codes` is non-empty and does not list it.
  std::vector<int> fatal_exit_codes;
  std::vector<int> retryable_exit_codes;
  // Pod/container reasons that are fatal (e.g. "ContainerCannotRun", "OOMKilled"), terminated
  // or waiting (controller/waiting_failure.h). InvalidImageName by default: a new pod from the
  // same template cannot parse the image either. A list the user sets replaces the default.
  std::vector<std::string> fatal_reasons = {"InvalidImageName"};
  bool preemptions_count_toward_max_restarts = false;
  // Failed pods of older incarnations kept per task (newest first) so `kubectl logs` of a crash
  // still works after the task was replaced; deleted with the job (owner references).
  int keep_failed_pods = 3;

  bool operator==(const FailurePolicy&) const = default;
};

struct PreemptionPolicy {
  // How long tasks get to agree on a step and checkpoint before affected pods are moved.
  absl::Duration checkpoint_grace = absl::Seconds(60);
  bool on_node_taints = true;        // termination/maintenance taints and cordons
  bool on_disruption_target = true;  // the pod's DisruptionTarget condition

  bool operator==(const PreemptionPolicy&) const = default;
};

struct CoordinationSpec {
  absl::Duration heartbeat_interval = absl::Seconds(1);
  absl::Duration heartbeat_timeout = absl::Seconds(10);
  absl::Duration barrier_timeout = absl::Minutes(5);
  absl::Duration shutdown_timeout = absl::Minutes(1);

  bool operator==(const CoordinationSpec&) const = default;
};

// spec.coordinator: where the coordinator pod runs and how. The operator's own scheduling
// defaults (Guaranteed requests, off nodes under a preemption notice, away from the job's
// tasks: controller/desired_state.h DesiredCoordinatorPod) are merged with these. The
// Kubernetes-typed fields are kept as the user wrote them (null: not set); DecodeSpec checks
// their JSON shape, the API server the rest when the pod is created.
struct CoordinatorSpec {
  Json node_selector;  // {label: value}
  Json tolerations;    // [core/v1 Toleration]
  Json affinity;       // core/v1 Affinity; its required node terms each get the notice rule
  Json resources;      // core/v1 ResourceRequirements; replaces the default requests/limits
  std::string priority_class_name;              // "": spec.priorityClassName
  std::vector<std::string> image_pull_secrets;  // Secret names
  std::string service_account_name;
  Json annotations;  // {key: value}, on the pod

  bool operator==(const CoordinatorSpec&) const = default;
};

// spec.placement (controller/desired_state.h TaskPlacementAffinity): every task pod in one
// topology domain (the nodes that share the value of the node label `topology_key`, e.g. a rack
// or an NVLink domain), and with `exclusive`, no other job's task pod in that domain. Empty key:
// the scheduler places each pod where it fits.
struct PlacementSpec {
  std::string topology_key;
  bool exclusive = false;

  bool operator==(const PlacementSpec&) const = default;
};

struct TrainingJobSpec {
  int replicas = 1;  // pods
  // Processes (tasks) per pod, started by the in-pod launcher (phalanx/launch.py): pod i runs
  // tasks i*n .. i*n+n-1. The operator manages pods; the coordinator sees replicas*n tasks.
  int nproc_per_node = 1;
  // Spare pods (ADR 0007): started from the same template, they wait warm in phalanx.init()
  // and take over a failed task at once (the coordinator hands it over). 0..replicas, and only
  // with nprocPerNode 1.
  int spares = 0;
  Json pod_template;  // a PodTemplateSpec (metadata + spec), kept whole: unknown fields survive
  FailurePolicy failure_policy;
  PreemptionPolicy preemption;
  CoordinationSpec coordination;
  bool suspend = false;
  // As batch/v1 Job's (controller/lifecycle.h). activeDeadlineSeconds: how long the job may be
  // active (from its creation or its last resume; a suspended job's clock stops) before it fails
  // with DeadlineExceeded. ttlSecondsAfterFinished: how long a finished job (Succeeded or Failed)
  // is kept before the operator deletes it, its pods (kept failed ones too) going with it.
  std::optional<absl::Duration> active_deadline;
  std::optional<absl::Duration> ttl_after_finished;
  // spec.gang.timeoutSeconds (controller/gang.h): a job forming for the first time whose task
  // pods are not all placed this long after they were created gives the placed ones' resources
  // back and tries again later. Unset: no gang release.
  std::optional<absl::Duration> gang_timeout;
  PlacementSpec placement;
  // spec.nodeAgent.enabled: the task pods get the node agent's clique channel
  // (PHALANX_CLIQUE_ADDRESS) where the operator is configured with one (docs/adr/0004).
  bool node_agent = true;
  std::string scheduler_name;
  std::string priority_class_name;
  SuccessPolicy success_policy = SuccessPolicy::kAllTasks;
  CoordinatorSpec coordinator;

  bool operator==(const TrainingJobSpec&) const = default;
  int NumTasks() const { return replicas * nproc_per_node; }
};

// metav1.Condition.
struct Condition {
  std::string type;
  std::string status;  // "True", "False", "Unknown"
  std::string reason;
  std::string message;
  absl::Time last_transition_time;
  int64_t observed_generation = 0;

  bool operator==(const Condition&) const = default;
};

// Job phases (DESIGN.md).
inline constexpr char kPhasePending[] = "Pending";
inline constexpr char kPhaseStarting[] = "Starting";
inline constexpr char kPhaseRunning[] = "Running";
inline constexpr char kPhaseRestarting[] = "Restarting";
// The operator cannot make progress until something outside it changes: the spec is invalid
// (InvalidSpec=True) or the API server refuses a child for good (ChildrenReady=False,
// FailedCreate: invalid, forbidden, over quota). Not terminal; see controller/blocked.h.
inline constexpr char kPhaseBlocked[] = "Blocked";
inline constexpr char kPhaseSucceeded[] = "Succeeded";
inline constexpr char kPhaseFailed[] = "Failed";
inline constexpr char kPhaseSuspended[] = "Suspended";

// What one task is doing, as status.tasks[].state says it (codec.h's TaskStateName is the one
// place that spells these as the CRD's strings).
enum class TaskState {
  kUnknown,      // not yet observed (written as no `state` at all)
  kPending,      // its pod is to be created or not running yet
  kRunning,      // its pod runs
  kSucceeded,    // its pod succeeded
  kRestarting,   // replaced by a new incarnation this pass
  kBackingOff,   // failed; waiting out the restart back-off
  kPreempting,   // its node or pod is being preempted; checkpointing before it moves
  kTerminating,  // its pod is being deleted (an eviction, or someone deleted it)
  kSuspended,    // the job is suspended
  // Terminal states, once the job has ended (controller/terminal_tasks.h):
  kFailed,   // its last pod failed (or it was waiting to restart) when the job ended
  kStopped,  // it was still running or starting when the job ended, so its pod was deleted
  // The coordinator declared it failed while its pod had not ended yet: the pod's own exit
  // status (exit code, OOMKilled, ...) is awaited a few seconds before the failure is
  // classified (controller/task_state.h).
  kAwaitingExit,
};

using base::Incarnation;

// status.tasks[].lastFailureMessage's bound (the CRD's maxLength says the same).
inline constexpr size_t kMaxFailureMessageBytes = 1024;

struct TaskStatus {
  int index = 0;
  std::string pod;
  std::string node;
  Incarnation incarnation = 0;
  TaskState state = TaskState::kUnknown;
  int restarts = 0;
  // Ranks of the task's pods that phalanx-launch restarted in place (nprocPerNode > 1): over all
  // its pods, and in its current pod (as the coordinator saw their incarnations register).
  int rank_restarts = 0;
  int rank_restarts_in_pod = 0;
  // Set while the task's replacement has not registered with the coordinator: when its
  // predecessor failed (or was moved), as far as known (controller/recovery_time.h).
  std::optional<absl::Time> recovering_since;
  std::string last_failure_reason;
  std::optional<int> last_exit_code;
  // Set while the task's node or pod is being preempted: when the operator first saw it (the
  // coordinated checkpoint gets the preemption grace from then).
  std::optional<absl::Time> preempting_since;
  // When the task was last moved off a preemption, oldest first, only those within the last
  // kMoveWindow (controller/move_budget.h): at most kMaxMovesPerWindow are made in any window,
  // and keeping them in status holds the bound across an operator restart.
  std::vector<absl::Time> recent_moves;
  // Set while a move is held back by that bound: when the task may move again.
  std::optional<absl::Time> move_held_until;
  // Why it last failed, in the words of whoever saw it: its container's termination message
  // (with terminationMessagePolicy FallbackToLogsOnError, its log's last lines), a container's
  // waiting message (InvalidImageName, ...) or the coordinator's words. At most
  // kMaxFailureMessageBytes, the end kept.
  std::string last_failure_message;
  // When the operator first saw the coordinator declare this incarnation failed while its pod
  // had not ended: the pod's exit status is awaited until a bound after it (kept in status so an
  // operator restart does not start the wait again).
  std::optional<absl::Time> failure_reported_at;
  // The spare pod that took the task over last, while it is the task's pod (controller/spares.h).
  std::string spare_of;

  bool operator==(const TaskStatus&) const = default;
};

// The coordinator pod's restarts (status.coordinator): a coordinator that ended is recreated
// after a back-off (controller/children.h), and why it ended is kept here and in a
// CoordinatorRestarted Event.
struct CoordinatorStatus {
  int restarts = 0;  // failures only: a move off a preempted node is not one
  // Moves off a node under a preemption notice (or a disrupted pod): no back-off, no restart
  // counted (controller/coordinator_move.h).
  int moves = 0;
  std::string moving_from;     // set from a move until its successor is placed: the old node
  std::string last_moved_pod;  // UID of the pod moved last: one pod counts once
  std::optional<int> last_exit_code;
  std::string last_exit_reason;                 // the container's reason (Error, OOMKilled, ...)
  std::string last_exit_message;                // its termination message, bounded
  std::optional<absl::Time> last_restart_time;  // when the last ended coordinator was seen
  std::optional<absl::Time> restart_after;      // not recreated before this (back-off)
  std::string last_failed_pod;                  // UID of the pod counted last: one pod counts once
  // Whether the job's Secret holds the TLS files (and so its pods use TLS): decided once, when
  // the operator first writes it (controller/children.h JobUsesTls), kept for the job's life.
  std::optional<bool> tls;

  bool operator==(const CoordinatorStatus&) const = default;
};

// status.goodput: the part of lostSeconds each late-known loss accounts for, and what the
// accounting step (controller/accounting.h) keeps between passes so that each is booked once,
// across passes and operator restarts. Time first booked as productive and then found lost is
// moved: productiveSeconds goes down by what lostSeconds goes up.
struct GoodputStatus {
  double detection_seconds = 0;           // from a task's failure to the operator's reaction
  double coordinator_outage_seconds = 0;  // Running while the coordinator pod was not ready
  double rolled_back_seconds = 0;         // work the workers discarded rolling back
  double regroup_seconds = 0;             // Running after a failure until the workers stepped again
  // Not in productiveSeconds or lostSeconds: the job's time before its first step (Pending, the
  // first start, and Running until the workers reported their first step).
  double before_first_step_seconds = 0;
  std::optional<absl::Time> first_step_time;  // the workers' first step, as they reported it
  // The current (running_until unset) or last stretch booked as Running, to the microsecond:
  // where a late-known loss may reach back to.
  std::optional<absl::Time> running_since;
  std::optional<absl::Time> running_until;
  // Set while the coordinator pod is missing, not Running or not ready: since when.
  std::optional<absl::Time> coordinator_down_since;
  // Failure-to-detection spans are booked as lost up to here; a later one starts after it.
  std::optional<absl::Time> detection_booked_until;
  // The coordinator (its random id) whose rolled-back total was booked last, and that total:
  // a coordinator that restarts counts from 0 again under a new id.
  std::string rollback_coordinator;
  double rollback_booked = 0;

  bool operator==(const GoodputStatus&) const = default;
};

struct TrainingJobStatus {
  std::string phase = kPhasePending;
  std::vector<Condition> conditions;
  std::vector<TaskStatus> tasks;
  int ready_tasks = 0;
  int restarts = 0;
  int rank_restarts = 0;  // the tasks' rank_restarts, summed (not in restarts or maxRestarts)
  // The last recovery's length: a task's failure (or move) until its replacement registered
  // with the coordinator (controller/recovery_time.h); nullopt before the first.
  std::optional<double> last_recovery_seconds;
  int preemptions = 0;
  int64_t observed_generation = 0;
  std::optional<absl::Time> start_time;
  std::optional<absl::Time> completion_time;
  std::optional<absl::Time> last_restart_time;  // backoff is measured from it
  // productive_seconds when the last restart (or preemption move) was made: the productive time
  // since then is the job's progress, which waives the back-off (controller/failure_policy.h).
  double productive_at_last_restart = 0;
  // Gang releases (controller/gang.h): how many times the forming job gave its placed pods'
  // resources back, and when it last did (its retry waits a back-off from then).
  int gang_releases = 0;
  std::optional<absl::Time> gang_released_at;
  // Goodput accounting: seconds with every task running vs. seconds lost to failures,
  // restarts and preemptions.
  double productive_seconds = 0;
  double lost_seconds = 0;
  std::optional<absl::Time> accounted_until;  // the seconds above cover time up to here
  GoodputStatus goodput;
  CoordinatorStatus coordinator;
  // Whether the job's task pods get credentials bound to their incarnation, each in its own
  // Secret (controller/task_credentials.h): decided when the job's Secret is first written, kept
  // for the job's life (a job made by an operator from before keeps its unbound ones).
  std::optional<bool> incarnation_bound_credentials;
  // spec.spares (controller/spares.h): spare pods that exist and have not ended, those of them
  // waiting with the coordinator for a task, the take-overs so far, and each spare slot's
  // current generation (slot k's pod is <job>-spare-<k>-<generations[k]>; a take-over or an
  // ended spare moves its slot to the next generation, so names never repeat and a pass that
  // does not see its own create yet makes the same name again, not a second pod).
  struct Spares {
    int total = 0;
    int ready = 0;
    int takeovers = 0;
    std::vector<int> generations;
    bool operator==(const Spares&) const = default;
  };
  Spares spares;

  bool operator==(const TrainingJobStatus&) const = default;
};

}  // namespace phalanx::op
