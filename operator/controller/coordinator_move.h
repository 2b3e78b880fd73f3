// Stage "coordinator move" (pass.h): a coordinator pod on a node under a preemption notice (or
// with the DisruptionTarget condition) is moved at once, before the node goes: the operator
// deletes it and the "children" stage creates its successor as soon as the old pod is gone
// (the name is fixed, <job>-coordinator, and the coordinator exits promptly on SIGTERM), with a
// node affinity that keeps it off every node under a notice. The tasks reconnect and
// re-register; an open preemption round is re-sent to the new coordinator pod (its UID
// changed: reconciler.h DeliverPreemptionNotices).
//
// A move is not a failure: it is counted in status.coordinator.moves, not restarts, gets no
// back-off and never touches a task's restarts or maxRestarts. A coordinator pod that ended
// while its node was under a notice or while disrupted (evicted before the operator could move
// it) counts as a move too. Events: CoordinatorMoving when the old pod is deleted (naming its
// node), CoordinatorMoved once the successor is placed (naming both nodes).
//
// spec.preemption.onNodeTaints / onDisruptionTarget switch the two triggers off as they do for
// tasks. Pure.
#pragma once

#include <string>
#include <vector>

#include "operator/controller/pass.h"

namespace phalanx::op {

Next MoveCoordinator(const PlanInputs& in, JobPass& pass);

// The nodes a new coordinator pod must avoid: every node under a preemption notice, in order.
std::vector<std::string> NodesToAvoid(const JobObservation& world);

}  // namespace phalanx::op
