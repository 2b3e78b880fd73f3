// SteppingTracker: whether the job's tasks are training, as the coordinator sees it, for the
// operator's goodput (operator/controller/accounting.h): the time before a job's first step and
// the time its group spends re-forming after a failure are not productive, though every pod is
// Running. Tasks say once per registration that they completed a step (ReportStepping); a
// task's failure or unnoticed restart is the tracker's other input. Plain data, no I/O, guarded
// by the service's lock.
//
//   no step yet ──any task's report──▶ stepping ──a task fails or is replaced──▶ regrouping
//                                         ▲                                          │
//                                         └──── a report from a task that registered ┘
//                                               after that failure (its replacement)
//
// A failure before the first step changes nothing (that time is before the first step already).
// A report from a task registered before the failure (a survivor) does not end a regroup: it may
// have left before the survivor heard of the failure, and in a re-formed group the survivors step
// only together with the replacement. Jobs whose tasks never report stay in "no step yet", and
// the operator then books as it always did (it cannot tell a job that does not report from one
// that has not stepped).
#pragma once

#include <cstdint>

#include "absl/time/time.h"
#include "runtime/coordination/types.h"

namespace phalanx::coord {

class SteppingTracker {
 public:
  // A task failed, or its connected incarnation was replaced, at `failed_at` (the coordinator's
  // last word from it); `version` is the job state's version then: tasks that register later
  // have a greater one. Returns whether the state changed.
  bool OnFailure(uint64_t version, absl::Time failed_at);
  // A task whose current state began at job-state version `task_version` reports a step at
  // `now`. Returns whether the state changed.
  bool OnStep(uint64_t task_version, absl::Time now);

  const SteppingState& state() const { return state_; }

 private:
  SteppingState state_;
  uint64_t failure_version_ = 0;  // the latest failure's
};

}  // namespace phalanx::coord
