// Stage "observe" (pass.h): the pass's starting point. The status written last time, with this
// generation; one record per task (index 0..replicas-1) holding its last status, its incarnation
// (the highest of the status's and its pods'), its pod at that incarnation and its older pods.
// Pods of indexes the job no longer has (replicas shrank, only through an invalid update) are
// deleted. Pure.
#pragma once

#include "operator/controller/pass.h"

namespace phalanx::op {

JobPass ObserveTasks(const PlanInputs& in);

}  // namespace phalanx::op
