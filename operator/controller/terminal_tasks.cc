#include "operator/controller/terminal_tasks.h"

namespace phalanx::op {

void SettleTaskStates(JobPass& pass) {
  for (TaskRecord& record : pass.tasks) {
    TaskState& state = record.status.state;
    const bool failed = record.event == TaskEvent::kFailed || record.event == TaskEvent::kFatal ||
                        state == TaskState::kBackingOff || state == TaskState::kFailed;
    if (state == TaskState::kSucceeded) continue;
    state = failed ? TaskState::kFailed : TaskState::kStopped;
  }
}

}  // namespace phalanx::op
