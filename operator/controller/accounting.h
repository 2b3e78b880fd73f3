// The pipeline's last step (pass.h): goodput. Time since the last accounting belongs to the
// phase the job was in: productive while Running, lost while Restarting (and while Starting or
// Blocked after a restart or preemption). It is booked when the phase changes and otherwise at
// most every kAccountingPeriod, so a steady job's status is not rewritten on every pass (each
// write is a watch event that would start another pass). A finished job books nothing. Pure.
#pragma once

#include "absl/time/time.h"
#include "operator/api/types.h"

namespace phalanx::op {

inline constexpr absl::Duration kAccountingPeriod = absl::Seconds(30);

// Books into `status` (this pass's) the time since `previous.accounted_until`.
void AccountTime(const TrainingJobStatus& previous, TrainingJobStatus& status, absl::Time now);

}  // namespace phalanx::op
