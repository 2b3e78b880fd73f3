#include "operator/controller/rank_restarts.h"

#include "absl/strings/str_cat.h"

namespace phalanx::op {

Next CountRankRestarts(const PlanInputs& in, JobPass& pass) {
  for (TaskRecord& record : pass.tasks) {
    TaskStatus& task = record.status;
    auto seen = in.world.rank_restarts.find(task.index);
    if (seen == in.world.rank_restarts.end() || seen->second.pod_incarnation != task.incarnation ||
        seen->second.restarts <= task.rank_restarts_in_pod) {
      continue;
    }
    const int added = seen->second.restarts - task.rank_restarts_in_pod;
    task.rank_restarts += added;
    task.rank_restarts_in_pod = seen->second.restarts;
    pass.out.status.rank_restarts += added;
    pass.out.events.push_back(
        {true, "RankRestarted",
         absl::StrCat(added == 1 ? "a rank" : absl::StrCat(added, " ranks"), " of task ",
                      task.index, "'s pod ", task.pod, added == 1 ? " was" : " were",
                      " restarted in place by its launcher (", task.rank_restarts_in_pod,
                      " in this pod, ", task.rank_restarts, " in all; the pod kept running)")});
  }
  return Next::kContinue;
}

}  // namespace phalanx::op
