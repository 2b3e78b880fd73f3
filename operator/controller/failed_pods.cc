#include "operator/controller/failed_pods.h"

#include <algorithm>

namespace phalanx::op {

bool KeepWhenReplaced(const PodView& pod, int keep_failed_pods) {
  return keep_failed_pods > 0 && pod.phase == PodPhase::kFailed;
}

std::vector<std::string> StalePodsToDelete(std::vector<PodView> stale, int keep_failed_pods) {
  // Newest first, so the failed pods kept are the latest crashes (the ones worth reading).
  std::sort(stale.begin(), stale.end(),
            [](const PodView& a, const PodView& b) { return a.incarnation > b.incarnation; });
  std::vector<std::string> out;
  int kept = 0;
  for (const PodView& pod : stale) {
    if (pod.being_deleted) continue;  // going already: it keeps no slot
    if (pod.phase == PodPhase::kFailed && kept < keep_failed_pods) {
      ++kept;
      continue;
    }
    out.push_back(pod.name);
  }
  return out;
}

}  // namespace phalanx::op
