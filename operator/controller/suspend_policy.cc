#include "operator/controller/suspend_policy.h"

#include "operator/controller/terminal_tasks.h"

namespace phalanx::op {
namespace {

// True once the job has been suspended: its Suspended condition is True, or says Resumed (a
// resume stays a resume). A job never suspended reads NotSuspended, not Resumed.
bool WasSuspended(const TrainingJobStatus& st) {
  for (const Condition& c : st.conditions) {
    if (c.type == "Suspended") return c.status == "True" || c.reason == "Resumed";
  }
  return false;
}

}  // namespace

Next ApplySuspend(const PlanInputs& in, JobPass& pass) {
  TrainingJobStatus& st = pass.out.status;
  const bool suspend = in.spec.suspend;
  if (suspend) {
    Mark(pass, "Suspended", true, "Suspended", "the job is suspended: its pods are deleted",
         in.now);
  } else if (st.phase == kPhaseSuspended || WasSuspended(st)) {
    Mark(pass, "Suspended", false, "Resumed", "the job was suspended and resumed", in.now);
  } else {
    Mark(pass, "Suspended", false, "NotSuspended", "", in.now);
  }
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
    SettleTaskStates(pass);
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
