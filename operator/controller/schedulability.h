// The schedulability stage: while the scheduler cannot place a task pod of the current
// incarnation (its PodScheduled=False, reason Unschedulable), the job carries the condition
// Unschedulable=True with the scheduler's own words ("task 1: 0/3 nodes are available: 3
// Insufficient nvidia.com/gpu."), so `kubectl describe tj` says why a replacement never starts
// and the operator's phalanx_operator_jobs_unschedulable gauge (and the PhalanxJobStuckRestarting
// alert over it) sees the job. Once no task pod is unschedulable the condition turns False; a
// job that was never unschedulable gets no condition. A Warning Event when it turns True, a
// Normal one when it clears: one per transition, not per pass. Pure; thread-compatible.
#pragma once

#include <cstddef>

#include "operator/controller/pass.h"

namespace phalanx::op {

// Bounds on the condition's message: at most this many tasks are named, each scheduler message
// cut to kMaxSchedulerMessage bytes ("... and N more" says how many were left out).
inline constexpr int kMaxUnschedulableTasksNamed = 3;
inline constexpr size_t kMaxSchedulerMessage = 256;

Next MarkUnschedulable(const PlanInputs& in, JobPass& pass);

// True when the TrainingJob object's status carries Unschedulable=True (for the operator's
// phalanx_operator_jobs_unschedulable gauge).
bool JobIsUnschedulable(const Json& job);

}  // namespace phalanx::op
