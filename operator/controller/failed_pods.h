// failurePolicy.keepFailedPods: which pods of a task's older incarnations are kept. A task's
// failed pod (phase Failed) is not deleted when the task is replaced, so `kubectl logs` and
// `kubectl describe` of the crash still work, as Kubernetes Jobs keep their failed pods; pod
// names carry the incarnation, so the replacement never collides with it. The newest
// `keepFailedPods` failed pods of each task are kept, older ones are deleted; every other pod of
// an older incarnation (one that did not end — running, hung, being preempted — or one that
// succeeded) is deleted as soon as it is stale. Kept pods have ended, so they hold no node
// resources, never count as running or ready (ObserveTasks files them under
// TaskRecord::stale), and go with the job (controller ownerReference, garbage collection).
// Used by RestartTask (pass.h) and the children stage (children.h). Pure; thread-safe.
#pragma once

#include <string>
#include <vector>

#include "operator/controller/observe.h"

namespace phalanx::op {

// True when `pod`, the pod its task is being replaced from, is kept rather than deleted.
bool KeepWhenReplaced(const PodView& pod, int keep_failed_pods);

// The names of the pods in `stale` (one task's pods of older incarnations, any order) to delete
// now: every pod that is not a failed one, and the failed ones beyond the newest
// `keep_failed_pods` by incarnation. Pods already being deleted are left out.
std::vector<std::string> StalePodsToDelete(std::vector<PodView> stale, int keep_failed_pods);

}  // namespace phalanx::op
