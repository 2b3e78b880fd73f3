#include "operator/controller/phase.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "operator/controller/blocked.h"

namespace phalanx::op {

Next SetPhaseAndConditions(const PlanInputs& in, JobPass& pass) {
  TrainingJobStatus& st = pass.out.status;
  const int n = in.spec.replicas;
  const bool awaiting_exit =
      std::any_of(pass.tasks.begin(), pass.tasks.end(),
                  [](const TaskRecord& r) { return r.status.state == TaskState::kAwaitingExit; });
  const bool restarting =
      !pass.moved.empty() || !TasksWith(pass, TaskEvent::kFailed).empty() || awaiting_exit;
  if (restarting) {
    st.phase = kPhaseRestarting;
  } else if (pass.running + pass.succeeded == n && pass.running > 0) {
    st.phase = kPhaseRunning;
    if (!st.start_time.has_value()) st.start_time = in.now;
  } else if (pass.running > 0 || st.start_time.has_value()) {
    st.phase = kPhaseStarting;
  } else {
    st.phase = kPhasePending;
  }
  if (StaysBlocked(in.previous, !pass.out.create.empty())) st.phase = kPhaseBlocked;
  const bool running = st.phase == kPhaseRunning;
  Mark(pass, "Running", running, running ? "AllTasksRunning" : st.phase,
       absl::StrCat(pass.running, "/", n, " tasks running"), in.now);
  if (pass.coordinator_address.empty()) {
    RequeueWithin(pass, absl::Milliseconds(500));  // waiting for the coordinator's address
  }
  return Next::kContinue;
}

}  // namespace phalanx::op
