#include "operator/controller/suspend_policy.h"

namespace phalanx::op {

Next ApplySuspend(const PlanInputs& in, JobPass& pass) {
  TrainingJobStatus& st = pass.out.status;
  const bool suspend = in.spec.suspend;
  Mark(pass, "Suspended", suspend, suspend ? "Suspended" : "Resumed",
       suspend ? "the job is suspended: its pods are deleted" : "", in.now);
  if (suspend && !IsTerminal(st.phase)) {
    if (st.phase != kPhaseSuspended) {
      pass.out.events.push_back({false, "Suspended", "job suspended"});
      for (TaskRecord& record : pass.tasks) {
        TaskStatus& task = record.status;
        ++task.incarnation;
        task.state = TaskState::kSuspended;
        task.pod.clear();
        task.node.clear();
        task.preempting_since.reset();
      }
    }
    DeleteActivePods(in, pass);
    st.phase = kPhaseSuspended;
    st.ready_tasks = 0;
    return Next::kDone;
  }
  if (IsTerminal(st.phase)) {
    DeleteActivePods(in, pass);
    st.ready_tasks = 0;
    return Next::kDone;
  }
  if (st.phase == kPhaseSuspended) {
    pass.out.events.push_back({false, "Resumed", "job resumed"});
    st.phase = kPhasePending;
  }
  return Next::kContinue;
}

}  // namespace phalanx::op
