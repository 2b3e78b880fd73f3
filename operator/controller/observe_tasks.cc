#include "operator/controller/observe_tasks.h"

#include <algorithm>

#include "common/kube/object_meta.h"

namespace phalanx::op {

JobPass ObserveTasks(const PlanInputs& in) {
  JobPass pass;
  TrainingJobStatus& st = pass.out.status;
  st = in.previous;
  st.observed_generation = kube::ObjectMeta::Decode(in.job).generation;
  const int n = in.spec.replicas;
  std::vector<TaskStatus> previous = std::move(st.tasks);
  st.tasks.clear();
  previous.resize(static_cast<size_t>(n));
  pass.tasks.resize(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    TaskRecord& record = pass.tasks[static_cast<size_t>(i)];
    record.status = std::move(previous[static_cast<size_t>(i)]);
    record.status.index = i;
  }
  // A spare pod the coordinator gave a task to is that task's pod at once, before the spares
  // stage relabels it (controller/spares.h): no replacement is made for the task meanwhile.
  std::vector<PodView> adopted;
  for (const PodView& spare : in.world.spare_pods) {
    auto it = in.world.spare_takeovers.find(spare.name);
    if (it == in.world.spare_takeovers.end() || it->second.task < 0 || it->second.task >= n) {
      continue;
    }
    PodView pod = spare;
    pod.index = it->second.task;
    pod.incarnation = it->second.incarnation;
    adopted.push_back(std::move(pod));
  }
  std::vector<PodView> pods = in.world.task_pods;
  pods.insert(pods.end(), adopted.begin(), adopted.end());
  for (const PodView& pod : pods) {
    if (pod.index < 0) continue;
    if (pod.index >= n) {
      if (!pod.being_deleted) pass.out.delete_pods.push_back(pod.name);
      continue;
    }
    Incarnation& incarnation = pass.tasks[static_cast<size_t>(pod.index)].status.incarnation;
    incarnation = std::max(incarnation, pod.incarnation);
  }
  for (const PodView& pod : pods) {
    if (pod.index < 0 || pod.index >= n) continue;
    TaskRecord& record = pass.tasks[static_cast<size_t>(pod.index)];
    if (pod.incarnation == record.status.incarnation && !record.pod.has_value()) {
      record.pod = pod;
    } else {
      // Older, or a second pod claiming the same incarnation (an operator replacement that
      // raced a spare's take-over): the first one seen stands, the other is deleted.
      record.stale.push_back(pod);
    }
  }
  return pass;
}

}  // namespace phalanx::op
