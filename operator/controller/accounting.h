// The pipeline's last step (pass.h): goodput. Time since the last accounting belongs to the
// phase the job was in: productive while Running, lost while Restarting, and lost while
// Starting or Blocked once the job has run (status.startTime) or restarted; Pending and a first
// start are the time before the first step (below); Blocked before it ran and Suspended are
// neither. It is booked when the phase or the coordinator's state
// changes and otherwise at most every kAccountingPeriod, so a steady job's status is not
// rewritten on every pass (each write is a watch event that would start another pass).
//
// Four losses the phase cannot show are booked as lost too (status.goodput keeps each part):
//   - detection: from a task's failure to the operator's reaction. The failure's instant is the
//     earliest the operator knows: the coordinator's last word from that incarnation (for a hang
//     its last heartbeat; for a crash the session's end) or the container's finishedAt. The part
//     of that span the job spent Running was booked productive: it is moved to lost once
//     (status.goodput.detectionBookedUntil marks how far; nothing before it is moved again).
//   - coordinator outage: Running while the coordinator pod is missing, not Running or not ready.
//   - rolled back: the work the workers discarded when they rolled back to a checkpoint, as
//     they reported it to the coordinator (ReportRolledBack) and the coordinator totals it per
//     coordinator start; the increase of that total is moved from productive to lost.
//   - regroup: after a failure, Running time until the group steps again, as the workers tell
//     the coordinator (ReportStepping: runtime/coordination/stepping_tracker.h). Pods Running
//     again are not training yet: the replacement starts, the group re-forms, state is restored.
//     It shares detection's mark (detectionBookedUntil): no span is moved twice.
// And one span is its own category, neither productive nor lost (goodput.beforeFirstStepSeconds):
// the job's time before its first step, from its creation (Pending, its first Starting: the
// scheduling, image pulls) through the Running time until the workers' first step (rendezvous,
// name resolution, loading), moved out of productive once the first step is reported
// (goodput.firstStepTime). A job whose workers never report steps keeps that Running time
// productive: the operator cannot tell a job that does not report from one that has not stepped.
// Nothing is moved beyond what was booked productive. A finished job books nothing. Pure.
#pragma once

#include <optional>
#include <vector>

#include "absl/time/time.h"
#include "operator/api/types.h"
#include "operator/controller/pass.h"

namespace phalanx::op {

inline constexpr absl::Duration kAccountingPeriod = absl::Seconds(30);

// What this pass knows besides the phases.
struct GoodputFacts {
  // The earliest instant a task whose failure is known this pass stopped working; nullopt: no
  // failure, or none whose instant is known.
  std::optional<absl::Time> failed_since;
  bool coordinator_up = true;
  std::optional<RolledBackReport> rolled_back;  // the coordinator's total, if it answered
  SteppingReport stepping;                      // the workers' stepping, if they reported
};

// The facts of a pass whose stages have run (`tasks` as they end it).
GoodputFacts GoodputFactsOf(const PlanInputs& in, const std::vector<TaskRecord>& tasks);

// Books into `status` (this pass's) the time since `previous.accounted_until`, and moves what
// `facts` show was lost from productive to lost.
void AccountTime(const TrainingJobStatus& previous, TrainingJobStatus& status, absl::Time now,
                 const GoodputFacts& facts = {});

}  // namespace phalanx::op
