// When a task pod that never started counts as failed: its container waits with a reason that
// will not clear by itself (or not soon), so the pod never fails and, without this, the job
// would wait for ever. Used by the task-state stage (task_state.h); the failure it yields is
// then matched against failurePolicy.fatalReasons like any other (failure_policy.h).
//
//   InvalidImageName                     at once: the image reference cannot be parsed, and a
//                                        new pod from the same template fails the same way
//   CreateContainerConfigError           once the pod is kStuckWaitingBound old: a missing
//                                        Secret or ConfigMap can still be created meanwhile
//   ErrImagePull, ImagePullBackOff       once the pod is kStuckWaitingBound old: a registry
//                                        outage or a slow pull may end meanwhile
//   anything else (ContainerCreating...) never
//
// Pure; thread-safe.
#pragma once

#include "absl/time/time.h"
#include "operator/controller/observe.h"

namespace phalanx::op {

// How long a pod may wait on a pull or its container config before the task counts as failed.
inline constexpr absl::Duration kStuckWaitingBound = absl::Minutes(5);

struct WaitingVerdict {
  bool failed = false;
  // Not failed yet, but will be at this time if nothing changes (absl::InfiniteFuture(): never).
  absl::Time fails_at = absl::InfiniteFuture();
};

// `pod` has not ended. Its waiting reason and age at `now` decide.
WaitingVerdict JudgeWaiting(const PodView& pod, absl::Time now);

// The failure `pod`'s waiting amounts to: reason and message are the waiting ones, no exit code.
PodView WaitingFailure(const PodView& pod);

}  // namespace phalanx::op
