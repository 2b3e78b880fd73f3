// Stages "ttl" and "deadline" (pass.h): batch/v1 Job's lifecycle fields.
//   - ttl (spec.ttlSecondsAfterFinished): a finished job (Succeeded or Failed) is deleted once that
//     long has passed since status.completionTime; its children go with it (their controller
//     ownerReference: the garbage collector deletes them, kept failed pods included). A TTLExpired
//     Event says so first. Before then the pass looks again when the time is up.
//   - deadline (spec.activeDeadlineSeconds): an active job fails with reason DeadlineExceeded
//     once it has been active that long. "Active" counts from the Suspended condition's last
//     transition: the job's first pass (NotSuspended) or its last resume (Resumed), so a
//     suspended job's clock stops and a resumed one starts again, as batch/v1 resets startTime
//     on resume. Runs after "suspend", which settles suspended and finished jobs first.
// Pure.
#pragma once

#include "operator/controller/pass.h"

namespace phalanx::op {

Next ExpireFinishedJob(const PlanInputs& in, JobPass& pass);
Next EnforceActiveDeadline(const PlanInputs& in, JobPass& pass);

}  // namespace phalanx::op
