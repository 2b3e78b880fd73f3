// CheckpointStore: the sample worker's checkpoints, one small file per saved step under
// <dir>/task-<id>/step-<N>, written atomically (temp file + rename) so a kill mid-write never
// leaves a torn checkpoint. Keeps the newest few. Not thread-safe (one training loop).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace phalanx::examples {

class CheckpointStore {
 public:
  CheckpointStore(std::string dir, int task_id, int keep = 3);

  // Saves the model state reached after `step` steps.
  absl::Status Save(int64_t step, uint64_t state);
  // Every step kept, oldest first.
  std::vector<int64_t> Kept() const;
  // The state saved at `step`; NotFound when it is not kept.
  absl::StatusOr<uint64_t> Load(int64_t step) const;

 private:
  std::string dir_;
  int keep_;
};

// The simulated model: a deterministic state per step, so a resumed run can be checked.
uint64_t AdvanceState(uint64_t state, int64_t step);

}  // namespace phalanx::examples
