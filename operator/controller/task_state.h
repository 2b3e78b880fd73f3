// Stage "task states" (pass.h): what each task's pod says about it, as its state and the event
// the later policies act on. In order of precedence, for the pod at the task's incarnation:
//   being deleted                      Terminating (a DisruptionTarget starts its preemption
//                                      clock); acted on once it is gone
//   none, but one ran                  gone while preempted: kPreemptedAndGone (Evicted);
//                                      otherwise kFailed, reason PodDeleted (a new process is a
//                                      new incarnation, never a reuse)
//   none yet                           Pending, kNoPod (the task-pods stage creates it)
//   Succeeded                          Succeeded
//   on a preempted node / disrupted    kPreempted (NodePreempted, DisruptionTarget)
//   Failed while being preempted       kPreempted: evicted before its checkpoint, or it exited
//                                      after it (as JAX programs do at the sync point)
//   Failed                             kFailed or kFatal (failure_policy.h ClassifyFailure),
//                                      by its exit code and reason
//   waiting on a reason that will not clear (waiting_failure.h: InvalidImageName at once;
//   ErrImagePull, ImagePullBackOff, CreateContainerConfigError past a bound)
//                                      kFailed or kFatal, by that reason (fatalReasons)
//   the coordinator declared this incarnation failed, the pod has not ended
//                                      AwaitingExit for up to kExitStatusWait after the operator
//                                      first saw the report (status failureReportedAt): the
//                                      pod's exit code and reason (OOMKilled, ...) classify it
//                                      when they come in time; past it kFailed or kFatal as
//                                      CoordinatorDeclaredFailed (a hang never exits)
//   otherwise                          Running or Pending
// A failure's message (the pod's termination or waiting message, else the coordinator's words)
// is cut to kMaxFailureMessageBytes, keeping the end. A task waiting on a bound asks for a pass
// when it ends (RequeueWithin).
// Counts running/ready/succeeded pods and sets status.readyTasks. Pure.
#pragma once

#include "operator/controller/pass.h"

namespace phalanx::op {

// How long a task the coordinator declared failed waits for its pod's own exit status. Pod
// status lags the coordinator's report by about a second on real clusters; a hung task is
// restarted this much later than it would be without the wait.
inline constexpr absl::Duration kExitStatusWait = absl::Seconds(5);
// The same wait for a pod of several local ranks (nprocPerNode > 1): its launcher restarts a
// dead rank in place, and the rank's replacement registering ends the coordinator's report. A
// report that outlives this (a hung rank, which the launcher cannot see) fails the pod.
inline constexpr absl::Duration kLocalRestartWait = absl::Seconds(30);
inline absl::Duration ExitStatusWait(int nproc_per_node) {
  return nproc_per_node > 1 ? kLocalRestartWait : kExitStatusWait;
}

Next ClassifyTasks(const PlanInputs& in, JobPass& pass);

// One task (exposed for its table test); `record.pod` is its current pod.
void ClassifyTask(const PlanInputs& in, TaskRecord& record);

}  // namespace phalanx::op
