// Stage "recovery time" (pass.h): how long a recovery took, as the coordinator saw it. When a
// task is replaced (RestartTask: a failure, a job restart, a move off a preempted node) its
// status gets recoveringSince, the instant its predecessor stopped as far as the operator knows
// (the pod's finishedAt, the coordinator's last word from it, else the replacement's pass). The
// recovery ends when the coordinator has registered the task's current incarnation (the link's
// world.coordinator_incarnations):
//
//   recoveringSince set, replacement registered --> status.lastRecoverySeconds = now - since,
//                                                   recoveringSince cleared, and the length is
//                                                   handed to the metrics (plan.recoveries)
//
// Registration is the operator's last sight of a recovery: the workers' own re-formation after
// it is theirs to report. Without a coordinator link nothing ends. Pure.
#pragma once

#include "operator/controller/pass.h"

namespace phalanx::op {

Next MeasureRecoveries(const PlanInputs& in, JobPass& pass);

// When task `i`'s current incarnation stopped, as far as this pass knows: its failed pod's
// finishedAt or the coordinator's last word from it, else `in.now`; never after `in.now`.
absl::Time StoppedAt(const PlanInputs& in, const TaskRecord& record);

}  // namespace phalanx::op
