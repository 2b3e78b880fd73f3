#include "operator/controller/success_policy.h"

#include "operator/controller/terminal_tasks.h"

namespace phalanx::op {

Next ApplySuccessPolicy(const PlanInputs& in, JobPass& pass) {
  const bool task_zero = in.spec.success_policy == SuccessPolicy::kTaskZero;
  const bool success = task_zero ? pass.tasks.front().status.state == TaskState::kSucceeded
                                 : pass.succeeded == in.spec.replicas;
  if (!success) return Next::kContinue;
  TrainingJobStatus& st = pass.out.status;
  st.phase = kPhaseSucceeded;
  st.completion_time = in.now;
  Mark(pass, "Succeeded", true, "Completed",
       task_zero ? "task 0 succeeded" : "every task succeeded", in.now);
  Mark(pass, "Running", false, "Completed", "", in.now);
  pass.out.events.push_back({false, "Completed", "job succeeded"});
  DeleteActivePods(in, pass);
  SettleTaskStates(pass);
  pass.out.create.clear();
  return Next::kDone;
}

}  // namespace phalanx::op
