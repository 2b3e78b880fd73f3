// Stage "spares" (pass.h): spec.spares, the spare pods of ADR 0007. A spare pod runs the job's
// template with a spare credential; its process waits warm in phalanx.init() until the
// coordinator, seeing a task's process die, hands it the task's next incarnation
// (runtime/coordination/spare_pool.h). The coordinator's snapshot names the pod; ObserveTasks
// already counts it as the task's pod. Here, each pass:
//
//   a spare pod the coordinator gave task i (incarnation n)
//     --> relabelled role=task, phalanx.dev/task=i, phalanx.dev/incarnation=n (what observation
//         reads from then on, also after an operator or coordinator restart); the first pass
//         that sees it counts a restart of the task (restarts, maxRestarts, spares.takeovers),
//         sets status.tasks[i].spareOf and records Event SpareTookOver; with maxRestarts
//         spent the job fails instead, and a fatal exit of the pod it took over (once known)
//         fails it too
//   a spare pod that ended (never given a task)     --> deleted, and replaced below
//   fewer live spare pods than spec.spares          --> <job>-spare-<spares.created> created,
//                                                       once the job has run (startTime)
//   more (spec.spares lowered)                       --> the newest deleted
//   status.spares: total (live spare pods), ready (those waiting with the coordinator)
//
// Spares wait for the job's task pods (a job starts without them). Pure.
#pragma once

#include "operator/controller/pass.h"

namespace phalanx::op {

Next ManageSpares(const PlanInputs& in, JobPass& pass);

}  // namespace phalanx::op
