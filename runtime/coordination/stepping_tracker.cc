#include "runtime/coordination/stepping_tracker.h"

#include <algorithm>

namespace phalanx::coord {

bool SteppingTracker::OnFailure(uint64_t version, absl::Time failed_at) {
  if (state_.first_step == absl::InfinitePast()) return false;
  failure_version_ = version;
  // A regroup never reaches back into the stepping that came before it (a hang's last word can
  // predate the re-formation that ended the previous regroup).
  const absl::Time since = std::max(failed_at, state_.stepping_since);
  if (state_.regrouping) {
    if (since >= state_.regroup_since) return false;  // the regroup started with the earlier one
    state_.regroup_since = since;
    return true;
  }
  state_.regrouping = true;
  state_.regroup_since = since;
  return true;
}

bool SteppingTracker::OnStep(uint64_t task_version, absl::Time now) {
  if (state_.first_step == absl::InfinitePast()) {
    state_.first_step = now;
    state_.stepping_since = now;
    return true;
  }
  if (!state_.regrouping || task_version <= failure_version_) return false;
  state_.regrouping = false;
  state_.stepping_since = std::max(now, state_.regroup_since);
  return true;
}

}  // namespace phalanx::coord
