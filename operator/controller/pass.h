// One reconcile pass in the making: the typed per-task records the planner's stages read and
// write, the plan they build up, and the helpers more than one stage needs (failing the job,
// replacing a task with its next incarnation). PlanReconcile (plan.h) runs the stages in the
// order Stages() lists them:
//
//   observe        observe_tasks.h    sort the pods into one record per task
//   ttl            lifecycle.h        a finished job past ttlSecondsAfterFinished is deleted
//   suspend        suspend_policy.h   suspend / resume; a finished job only cleans up
//   deadline       lifecycle.h        an active job past activeDeadlineSeconds fails
//   coordinator move coordinator_move.h move the coordinator off a node under a notice
//   children       children.h         Secret, Services, coordinator pod and its address
//   task states    task_state.h       each task's state and what happened to it, from its pod
//   schedulability schedulability.h   Unschedulable condition while a task pod finds no node
//   task pods      children.h         create the task pods that do not exist yet
//   spares         spares.h           relabel spares that took a task over; keep spec.spares
//   fatal          failure_policy.h   a fatal failure fails the job
//   preemption     preemption_policy.h checkpoint, then move preempted tasks
//   failures       failure_policy.h   restart failed tasks within maxRestarts, after back-off
//   success        success_policy.h   all tasks (or task 0) succeeded
//   phase          phase.h            the job's phase and Running condition
//
// then PreemptionNotices (preemption_policy.h) and accounting (accounting.h). A stage that
// settles the pass (the job failed, succeeded, is suspended or backing off) returns kDone and
// the later stages do not run. Every stage is a function of (inputs, pass) with no I/O and no
// clock but `in.now`. Thread-compatible values.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "operator/controller/plan.h"

namespace phalanx::op {

// What the task-state stage found happened to a task this pass (what the policies act on).
enum class TaskEvent {
  kNone,              // nothing to act on (running, pending, succeeded, terminating)
  kNoPod,             // no pod at its incarnation yet: to be created
  kFailed,            // failed (its pod, the coordinator's word, or its pod vanished): retryable
  kFatal,             // failed in a way the failure policy treats as fatal
  kPreempted,         // its node or pod is being preempted (`preemption_reason` says how)
  kPreemptedAndGone,  // its pod was evicted while being preempted and is gone: move it now
};

// Everything the planner knows and decides about one task, in one place.
struct TaskRecord {
  TaskStatus status;           // what status.tasks[index] says once the pass ends
  std::optional<PodView> pod;  // its pod at status.incarnation, if any
  std::vector<PodView> stale;  // pods of older incarnations still around
  TaskEvent event = TaskEvent::kNone;
  std::string preemption_reason;  // NodePreempted, DisruptionTarget or Evicted
  PodView failure;                // kFailed/kFatal: the pod as it failed (or a stand-in)
  // The node agent's deadline for the task's node (absl::InfiniteFuture(): none known).
  absl::Time node_deadline = absl::InfiniteFuture();
  // The task-state stage looks again at this time (a bound it waits on ends then).
  absl::Time recheck_at = absl::InfiniteFuture();
};

struct JobPass {
  ReconcilePlan out;  // out.status.tasks stays empty during the pass: the tasks are in `tasks`
  std::vector<TaskRecord> tasks;
  std::string coordinator_address;            // empty while the coordinator's address is not known
  int running = 0, ready = 0, succeeded = 0;  // task pods as the task-state stage found them
  std::vector<int> moved;  // tasks moved off a preemption this pass (failures wait a pass)
  bool gang_hold = false;  // a released gang waits out its back-off: no task pod is created
  bool coordinator_unproven = false;  // world.coordinator_unproven, from the children stage

  // Whether task pods may be created this pass: the coordinator's address is known; the job's
  // token Secret is not someone else's (a squatter's: the pods would mount its credentials) —
  // the coordinator has answered with the job's token, and has not refused the Secret's
  // (children.cc); and no released gang is waiting out its back-off (gang.h).
  bool MayCreateTaskPods() const {
    return !coordinator_address.empty() && out.secret_conflict.empty() && !gang_hold &&
           !coordinator_unproven;
  }
};

enum class Next { kContinue, kDone };

struct Stage {
  std::string_view name;
  Next (*run)(const PlanInputs& in, JobPass& pass);
};

// The stages after observe, in order.
std::span<const Stage> Stages();

// For stage tests: the pass as the stage named `stage` receives it (observe, then every stage
// before it; a stage that settles the pass earlier stops it there).
JobPass PassBefore(const PlanInputs& in, std::string_view stage);

// --- Helpers the stages share ----------------------------------------------------------------

std::string JobName(const PlanInputs& in);
// Task `index`'s pod at `incarnation`, with the TLS and credential scheme the job's Secret was
// written with (as the pass's status records them: children.h).
Json NewTaskPod(const PlanInputs& in, const JobPass& pass, int index, Incarnation incarnation);
bool IsTerminal(const std::string& phase);  // Succeeded or Failed
// Sets condition `type` on the pass's status (metav1 semantics, codec.h SetCondition).
void Mark(JobPass& pass, const std::string& type, bool value, const std::string& reason,
          const std::string& message, absl::Time now);
// "pod <name> exited with code <c> (<reason>): <message>", as much as is known.
std::string Describe(const PodView& pod);
// "task <i>'s pod <name> is disrupted (DisruptionTarget <reason>: <message>)": what a
// PreemptionNotice says when the pod itself, not its node, is being taken (the scheduler
// preempting it for a higher-priority pod, an eviction).
std::string DescribeDisruption(int task, const PodView& pod);
// Look again within `d` (keeps an earlier requeue).
void RequeueWithin(JobPass& pass, absl::Duration d);
// Deletes the spare pods that have not ended and took no task over (spares.h).
void DeleteLiveSpares(const PlanInputs& in, JobPass& pass);
// Deletes every task and spare pod that has not ended and the coordinator pod.
void DeleteActivePods(const PlanInputs& in, JobPass& pass);
// Phase Failed, conditions Failed=True/Running=False, a Warning Event, every pod that did not end
// deleted, terminal task states (terminal_tasks.h), nothing created.
void FailJob(const PlanInputs& in, JobPass& pass, const std::string& reason,
             const std::string& message);
// The incarnation that replaces task `i`'s `current` one: one above both it and the newest
// the coordinator registered for the task (world.coordinator_incarnations) or handed to a spare
// (world.spare_takeovers). A registration the
// operator did not make (a zombie, a forged jump of up to the coordinator's kMaxIncarnationStep)
// would otherwise make every replacement stale (Aborted at Register) for good; this way the
// replacement supersedes it.
Incarnation NextIncarnation(const PlanInputs& in, int i, Incarnation current);
// Replaces task `i` by its next incarnation: deletes its pod (a failed one may be kept:
// failed_pods.h), counts a task restart (status.tasks[i].restarts; the job's status.restarts
// is the caller's), records
// `reason` and `exit_code`, and creates the new pod once the coordinator's address is known.
void RestartTask(const PlanInputs& in, JobPass& pass, int i, const std::string& reason,
                 std::optional<int> exit_code);
// Restarts every task: those in `cause` with `reason` (and their exit code when they failed),
// the others with "JobRestart".
void RestartAll(const PlanInputs& in, JobPass& pass, const std::string& reason,
                const std::vector<int>& cause);
// The tasks whose event is `event`, in index order.
std::vector<int> TasksWith(const JobPass& pass, TaskEvent event);

}  // namespace phalanx::op
