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
//   a task whose pod failed while a spare waits, and whose failure the coordinator has not
//   reported yet                                     --> not replaced yet (up to 3 s after the
//                                                       pod ended): the coordinator may have
//                                                       given it to the spare, and its word
//                                                       was overtaken by the pod's status
//   a spare pod that ended (never given a task)     --> deleted; its slot moves on
//   a slot k < spec.spares without its live pod     --> <job>-spare-<k>-<generations[k]>
//                                                       created, once the job has run
//   a spare of a slot >= spec.spares (lowered), or of an older generation --> deleted
//   status.spares: total (live spare pods), ready (those waiting with the coordinator),
//   generations (per slot; a take-over moves the slot of the pod that took it on)
//
// Spares wait for the job's task pods (a job starts without them). Pure.
#pragma once

#include "operator/controller/pass.h"

namespace phalanx::op {

Next ManageSpares(const PlanInputs& in, JobPass& pass);

}  // namespace phalanx::op
