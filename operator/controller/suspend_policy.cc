#include "operator/controller/suspend_policy.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/kube/object_meta.h"
#include "operator/controller/preemption_policy.h"
#include "operator/controller/terminal_tasks.h"

namespace phalanx::op {
namespace {

// True once the job has been suspended: its Suspended condition is True, or says Resumed (a
// resume stays a resume). A job never suspended reads NotSuspended, not Resumed.
bool WasSuspended(const TrainingJobStatus& st) {
  for (const Condition& c : st.conditions) {
    if (c.type == "Suspended") return c.status == "True" || c.reason == "Resumed";
  }
  return false;
}

// Suspending a running job first checkpoints it, as a preemption of every task would: each task
// with a live pod gets a notice (the coordinator opens one round, the tasks checkpoint at the
// step they agree on and leave), and the suspend goes on once they have all left or their
// checkpoint deadline (checkpointGraceSeconds, or a preempted node's own) has passed. True while
// that round still runs; the pods are kept meanwhile.
bool CheckpointBeforeSuspend(const PlanInputs& in, JobPass& pass) {
  const PreemptionPolicy& policy = in.spec.preemption;
  std::vector<TaskRecord*> live;
  bool round_started = false;
  for (TaskRecord& record : pass.tasks) {
    round_started |= record.status.preempting_since.has_value();
    if (record.pod.has_value() && record.pod->live()) live.push_back(&record);
  }
  // Nothing to save: no live task, no checkpoint time, or a job that never ran (Pending).
  if (live.empty() || policy.checkpoint_grace <= absl::ZeroDuration()) return false;
  if (!round_started && pass.out.status.phase != kPhaseRunning) return false;
  absl::Time first_deadline = absl::InfiniteFuture();
  absl::Time next_deadline = absl::InfiniteFuture();  // the first one still ahead
  bool noticed = false;                               // a task's checkpoint clock started this pass
  for (TaskRecord* record : live) {
    if (!record->status.preempting_since.has_value()) {
      record->status.preempting_since = in.now;
      noticed = true;
    }
    const absl::Time deadline = CheckpointDeadline(*record, policy);
    first_deadline = std::min(first_deadline, deadline);
    if (deadline > in.now) next_deadline = std::min(next_deadline, deadline);
  }
  if (noticed) {
    pass.out.events.push_back(
        {false, "Suspending",
         absl::StrCat("job suspending: its tasks checkpoint at a step they agree on first "
                      "(deadline ",
                      kube::FormatKubeTime(first_deadline), "), then its pods are deleted")});
  }
  if (next_deadline == absl::InfiniteFuture()) {  // every deadline has passed
    pass.out.events.push_back(
        {true, "SuspendCheckpointTimedOut",
         absl::StrCat(live.size(), live.size() == 1 ? " task" : " tasks",
                      " had not checkpointed and left by the deadline; suspending anyway: they "
                      "resume from their last checkpoint")});
    return false;
  }
  // One notice for every task of the round, kept until the suspend goes on (the ledger sends it
  // once); tasks that already left wait with the rest.
  for (TaskRecord& record : pass.tasks) {
    if (record.status.preempting_since.has_value()) record.status.state = TaskState::kPreempting;
  }
  RequeueWithin(pass, next_deadline - in.now);
  return true;
}

}  // namespace

Next ApplySuspend(const PlanInputs& in, JobPass& pass) {
  TrainingJobStatus& st = pass.out.status;
  const bool suspend = in.spec.suspend;
  if (suspend) {
    Mark(pass, "Suspended", true, "Suspended", "the job is suspended: its pods are deleted",
         in.now);
  } else if (st.phase == kPhaseSuspended || WasSuspended(st)) {
    Mark(pass, "Suspended", false, "Resumed", "the job was suspended and resumed", in.now);
  } else {
    Mark(pass, "Suspended", false, "NotSuspended", "", in.now);
  }
  if (suspend && !IsTerminal(st.phase)) {
    // Spares go first: a task that checkpoints and exits must not be taken over by one.
    DeleteLiveSpares(in, pass);
    if (st.phase != kPhaseSuspended && CheckpointBeforeSuspend(in, pass)) {
      Mark(pass, "Suspended", true, "Checkpointing",
           "the job is suspending: its tasks checkpoint first, then its pods are deleted", in.now);
      return Next::kDone;
    }
    if (st.phase != kPhaseSuspended) {
      pass.out.events.push_back({false, "Suspended", "job suspended"});
      for (TaskRecord& record : pass.tasks) {
        TaskStatus& task = record.status;
        // A pod that left after the suspend's checkpoint goes too: it did not fail, and a
        // suspended job has no pods (DeleteActivePods keeps ended ones, for failures' logs).
        if (task.preempting_since.has_value() && record.pod.has_value() && record.pod->ended() &&
            !record.pod->being_deleted) {
          pass.out.delete_pods.push_back(record.pod->name);
        }
        task.incarnation = NextIncarnation(in, task.index, task.incarnation);
        task.rank_restarts_in_pod = 0;
        task.state = TaskState::kSuspended;
        task.pod.clear();
        task.node.clear();
        task.preempting_since.reset();
      }
    }
    DeleteActivePods(in, pass);
    st.phase = kPhaseSuspended;
    st.ready_tasks = 0;
    return Next::kDone;
  }
  if (IsTerminal(st.phase)) {
    DeleteActivePods(in, pass);
    SettleTaskStates(pass);
    st.ready_tasks = 0;
    return Next::kDone;
  }
  if (st.phase == kPhaseSuspended) {
    pass.out.events.push_back({false, "Resumed", "job resumed"});
    st.phase = kPhasePending;
  }
  return Next::kContinue;
}

}  // namespace phalanx::op
