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
//   Failed, or the coordinator declared this incarnation failed
//                                      kFailed or kFatal (failure_policy.h ClassifyFailure)
//   otherwise                          Running or Pending
// Counts running/ready/succeeded pods and sets status.readyTasks. Pure.
#pragma once

#include "operator/controller/pass.h"

namespace phalanx::op {

Next ClassifyTasks(const PlanInputs& in, JobPass& pass);

// One task (exposed for its table test); `record.pod` is its current pod.
void ClassifyTask(const PlanInputs& in, TaskRecord& record);

}  // namespace phalanx::op
