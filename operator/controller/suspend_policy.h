// Stage "suspend" (pass.h), as batch/v1 Job does it (so queueing systems such as Kueue can admit
// a job): while spec.suspend is set the job has no pods, only its status. A Running job is
// checkpointed first, as a preemption of every task would be: a Suspending Event, condition
// Suspended True reason Checkpointing, a notice for every live task; its pods stay until every
// task has left after checkpointing at the agreed step, or until checkpointGraceSeconds passed
// (a Warning SuspendCheckpointTimedOut, and the suspend goes on); a job not Running has nothing
// to save and is suspended at once. Suspending records a Suspended Event and gives every task its
// next incarnation (a resumed task is a new process, neither a failure nor a restart to count);
// resuming records a Resumed Event and starts over from Pending. A finished job (Succeeded or
// Failed) only has its leftover pods deleted and its task states settled (terminal_tasks.h). Sets
// the Suspended condition every pass: True reason Suspended while suspended (Checkpointing
// before); False reason Resumed once a suspended job was resumed (and from then on); False
// reason NotSuspended for a job that was never suspended. Pure.
#pragma once

#include "operator/controller/pass.h"

namespace phalanx::op {

Next ApplySuspend(const PlanInputs& in, JobPass& pass);

}  // namespace phalanx::op
