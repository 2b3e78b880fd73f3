#include "runtime/coordination/peer_events.h"

#include <utility>

namespace phalanx::coord {

void PeerEventCoalescer::Add(SessionEvent event) {
  if (const auto* info = std::get_if<TaskInfo>(&event)) {
    latest_info_.insert_or_assign(info->task_id, pending_.size());
  }
  pending_.push_back(std::move(event));
}

std::shared_ptr<const PeerBatch> PeerEventCoalescer::Take() {
  if (pending_.empty()) return nullptr;
  auto batch = std::make_shared<PeerBatch>();
  batch->id = ++last_batch_id_;
  batch->events.reserve(pending_.size());
  for (size_t i = 0; i < pending_.size(); ++i) {
    // A task that changed twice before this batch: peers get its latest state only.
    if (const auto* info = std::get_if<TaskInfo>(&pending_[i]);
        info != nullptr && latest_info_[info->task_id] != i) {
      continue;
    }
    batch->events.push_back(std::move(pending_[i]));
  }
  pending_.clear();
  latest_info_.clear();
  holding_ = true;
  return batch;
}

}  // namespace phalanx::coord
