#include "operator/controller/waiting_failure.h"

namespace phalanx::op {

WaitingVerdict JudgeWaiting(const PodView& pod, absl::Time now) {
  const std::string& reason = pod.waiting_reason;
  if (reason == "InvalidImageName") return {true, now};
  if (reason != "CreateContainerConfigError" && reason != "ErrImagePull" &&
      reason != "ImagePullBackOff") {
    return {};
  }
  // An unknown creation time never fails the task (the API server always sets one).
  if (pod.created == absl::InfiniteFuture()) return {};
  const absl::Time at = pod.created + kStuckWaitingBound;
  return {now >= at, at};
}

PodView WaitingFailure(const PodView& pod) {
  PodView failure = pod;
  failure.exit_code.reset();
  failure.reason = pod.waiting_reason;
  failure.message = pod.waiting_message;
  return failure;
}

}  // namespace phalanx::op
