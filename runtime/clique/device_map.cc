#include "runtime/clique/device_map.h"

#include <algorithm>
#include <map>
#include <numeric>

#include "absl/strings/str_cat.h"

namespace phalanx::clique {

std::vector<int> DeviceTable::LogicalIds(int task_id) const {
  std::vector<int> ids;
  for (const DeviceEntry& e : entries) {
    if (e.task_id == task_id) ids.push_back(e.logical_id);
  }
  return ids;
}

std::optional<DeviceEntry> DeviceTable::Find(int task_id, int logical_id) const {
  for (const DeviceEntry& e : entries) {
    if (e.task_id == task_id && e.logical_id == logical_id) return e;
  }
  return std::nullopt;
}

absl::StatusOr<DeviceTable> BuildDeviceTable(std::vector<TaskGpus> reports) {
  std::sort(reports.begin(), reports.end(),
            [](const TaskGpus& a, const TaskGpus& b) { return a.task_id < b.task_id; });
  std::map<std::string, int> owner;  // uuid -> task id
  DeviceTable table;
  for (size_t i = 0; i < reports.size(); ++i) {
    const TaskGpus& r = reports[i];
    if (r.task_id < 0) {
      return absl::InvalidArgumentError(absl::StrCat("negative task id ", r.task_id));
    }
    if (i > 0 && reports[i - 1].task_id == r.task_id) {
      return absl::InvalidArgumentError(absl::StrCat("task ", r.task_id, " reported twice"));
    }
    std::vector<int> ordinals(r.uuids.size());
    std::iota(ordinals.begin(), ordinals.end(), 0);
    std::sort(ordinals.begin(), ordinals.end(),
              [&](int a, int b) { return r.uuids[a] < r.uuids[b]; });
    for (size_t logical = 0; logical < ordinals.size(); ++logical) {
      const std::string& uuid = r.uuids[ordinals[logical]];
      if (uuid.empty()) {
        return absl::InvalidArgumentError(
            absl::StrCat("task ", r.task_id, ": empty UUID for CUDA ordinal ", ordinals[logical]));
      }
      auto [it, inserted] = owner.emplace(uuid, r.task_id);
      if (!inserted) {
        return absl::InvalidArgumentError(
            absl::StrCat("GPU ", uuid, " reported by task ", it->second, " and task ", r.task_id));
      }
      table.entries.push_back(DeviceEntry{r.task_id, static_cast<int>(logical),
                                          static_cast<int>(table.entries.size()), ordinals[logical],
                                          uuid});
    }
  }
  return table;
}

}  // namespace phalanx::clique
