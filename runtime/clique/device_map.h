// Device map: stable logical GPU ids for clique keys. Each task reports its GPUs' UUIDs (in
// CUDA ordinal order); every task gathers all reports (e.g. from the KV store) and computes the
// same DeviceTable with BuildDeviceTable, a pure function.
//
// A task's logical ids are 0..n-1, given in ascending UUID order. They depend only on how many
// GPUs the task has, so a task restarted on other physical GPUs keeps its logical ids, and a
// clique key (which holds logical ids) changes only by the task's incarnation. On the same
// node the same GPU keeps the same logical id, whatever CUDA_VISIBLE_DEVICES orders.
//
// Value types; thread-compatible.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace phalanx::clique {

// One task's report.
struct TaskGpus {
  int task_id = 0;
  std::vector<std::string> uuids;  // index = CUDA ordinal in that process
};

struct DeviceEntry {
  int task_id = 0;
  int logical_id = 0;    // within the task: 0..n-1
  int global_index = 0;  // position in the job-wide table
  int cuda_ordinal = 0;  // what the task passes to cudaSetDevice
  std::string uuid;

  friend bool operator==(const DeviceEntry&, const DeviceEntry&) = default;
};

struct DeviceTable {
  // Sorted by (task id, logical id).
  std::vector<DeviceEntry> entries;

  // The task's logical ids (0..n-1), empty for an unknown task.
  std::vector<int> LogicalIds(int task_id) const;
  // The entry for (task, logical id), if any.
  std::optional<DeviceEntry> Find(int task_id, int logical_id) const;

  friend bool operator==(const DeviceTable&, const DeviceTable&) = default;
};

// The same table for the same reports, in any order. InvalidArgument for a repeated task id,
// a negative task id, an empty UUID, or a UUID reported twice (within or across tasks).
absl::StatusOr<DeviceTable> BuildDeviceTable(std::vector<TaskGpus> reports);

}  // namespace phalanx::clique
