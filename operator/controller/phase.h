// Stage "phase" (pass.h): the job's phase and its Running condition when no earlier stage
// settled them. Restarting while tasks are being replaced (or wait to be); Running once every
// task runs or has succeeded (startTime is set the first time); Starting once one runs or the
// job ran before; Pending otherwise. A job whose children the API server refused for good stays
// Blocked while they are still to create (blocked.h StaysBlocked). Without the coordinator's
// address yet, looks again in 500 ms. Pure.
#pragma once

#include "operator/controller/pass.h"

namespace phalanx::op {

Next SetPhaseAndConditions(const PlanInputs& in, JobPass& pass);

}  // namespace phalanx::op
