#include "operator/controller/accounting.h"

namespace phalanx::op {

void AccountTime(const TrainingJobStatus& previous, TrainingJobStatus& st, absl::Time now) {
  if (previous.phase == kPhaseSucceeded || previous.phase == kPhaseFailed) return;
  if (!previous.accounted_until.has_value()) {
    st.accounted_until = now;
    return;
  }
  const absl::Duration elapsed = now - *previous.accounted_until;
  if (st.phase == previous.phase && elapsed < kAccountingPeriod) return;
  if (elapsed > absl::ZeroDuration()) {
    const double dt = absl::ToDoubleSeconds(elapsed);
    if (previous.phase == kPhaseRunning) {
      st.productive_seconds += dt;
    } else if (previous.phase == kPhaseRestarting ||
               ((previous.phase == kPhaseStarting || previous.phase == kPhaseBlocked) &&
                previous.restarts + previous.preemptions > 0)) {
      st.lost_seconds += dt;
    }
  }
  st.accounted_until = now;
}

}  // namespace phalanx::op
