// Stage "preemption" (pass.h) and the notices it implies: spec.preemption.
// A task whose node is being preempted (taint or cordon) or whose pod is disrupted starts a
// coordinated checkpoint once (preemptingSince, a PreemptionNotice Event naming the deadline;
// the reconciler adds CheckpointRoundOpened once the coordinator accepted the round),
// and moves — its pod deleted, its next incarnation created — when the deadline passes, when its
// pod ends (it left after its checkpoint, or was evicted), or at once when the pod is already
// gone. The deadline is the earlier of preemptingSince + checkpointGraceSeconds and the node's
// own deadline as the node agent announced it (kube/node_preemption.h): a GCE VM gets 30 s whatever
// the grace says. Moves count as preemptions, and toward maxRestarts only when
// failurePolicy.preemptionsCountTowardMaxRestarts says so (then past it the job fails). With
// restartScope Job every task restarts. A task is moved at most kMaxMovesPerWindow times a minute
// (move_budget.h); past that it waits, Preempting. Pure.
#pragma once

#include <vector>

#include "operator/controller/pass.h"

namespace phalanx::op {

Next ApplyPreemptions(const PlanInputs& in, JobPass& pass);

// When task `record`'s checkpoint must be done (it must have preempting_since).
absl::Time CheckpointDeadline(const TaskRecord& record, const PreemptionPolicy& policy);

// The notices the coordinator must have: every task still checkpointing (Preempting) or whose
// pod is going away after a disruption (Terminating), with its deadline. Level-triggered: the
// same notices come out every pass until the tasks move; the reconciler delivers each once.
std::vector<PreemptionNotice> PreemptionNotices(const std::vector<TaskRecord>& tasks,
                                                const PreemptionPolicy& policy);

}  // namespace phalanx::op
