// Stage "success" (pass.h): spec.successPolicy. AllTasks: the job succeeds when every task's pod
// has succeeded; TaskZero: as soon as task 0's has (the others are then deleted, as with a
// parameter-server or leader-based job). Success sets phase Succeeded, completionTime, the
// Succeeded condition and a Completed Event, and deletes every pod still running. Pure.
#pragma once

#include "operator/controller/pass.h"

namespace phalanx::op {

Next ApplySuccessPolicy(const PlanInputs& in, JobPass& pass);

}  // namespace phalanx::op
