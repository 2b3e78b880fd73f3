// Stages "children" and "task pods" (pass.h): the job's fixed children — its token Secret, the
// tasks' headless Service, the coordinator's Service and pod — are created when missing, a
// coordinator pod that ended is deleted (and recreated under the same name once gone: tasks
// reconnect and re-register), and the coordinator's address is settled (by pod IP: only once
// the pod runs). Pods of older incarnations are deleted. Then, after the task-state stage, each
// task without a pod gets one at its incarnation, once the coordinator's address is known.
// Names are deterministic (desired_state.h), so a create that raced an earlier one is an
// AlreadyExists the reconciler ignores. Pure.
#pragma once

#include "operator/controller/pass.h"

namespace phalanx::op {

Next EnsureJobChildren(const PlanInputs& in, JobPass& pass);
Next EnsureTaskPods(const PlanInputs& in, JobPass& pass);

}  // namespace phalanx::op
