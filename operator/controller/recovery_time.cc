#include "operator/controller/recovery_time.h"

#include <algorithm>

namespace phalanx::op {

absl::Time StoppedAt(const PlanInputs& in, const TaskRecord& record) {
  absl::Time at = in.now;
  if (record.failure.finished_at.has_value()) at = std::min(at, *record.failure.finished_at);
  auto said = in.world.coordinator_failed.find(record.status.index);
  if (said != in.world.coordinator_failed.end() &&
      said->second.incarnation >= record.status.incarnation &&
      said->second.last_heard != absl::InfinitePast()) {
    at = std::min(at, said->second.last_heard);
  }
  return at;
}

Next MeasureRecoveries(const PlanInputs& in, JobPass& pass) {
  // Tasks replaced together (a job restart) end their recovery when the last registers.
  std::optional<double> longest;
  for (TaskRecord& record : pass.tasks) {
    TaskStatus& task = record.status;
    if (!task.recovering_since.has_value()) continue;
    auto registered = in.world.coordinator_incarnations.find(task.index);
    if (registered == in.world.coordinator_incarnations.end() ||
        registered->second < task.incarnation) {
      continue;
    }
    const double seconds = std::max(0.0, absl::ToDoubleSeconds(in.now - *task.recovering_since));
    task.recovering_since.reset();
    pass.out.recoveries.push_back(seconds);
    longest = std::max(longest.value_or(0.0), seconds);
  }
  if (longest.has_value()) pass.out.status.last_recovery_seconds = *longest;
  return Next::kContinue;
}

}  // namespace phalanx::op
