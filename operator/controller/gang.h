// Stage "gang" (pass.h): all or nothing while a job forms for the first time (it never had
// every task running: status.startTime unset), with spec.gang.timeoutSeconds set. Kubernetes'
// scheduler places pods one by one, so two jobs that each got part of the cluster would hold
// their GPUs against each other for good. Here:
//
//   forming, some task pods placed,   --(oldest current pod older than the timeout)-->  release:
//   at least one Unschedulable            the placed (and every other live) task pod is deleted,
//                                          every task gets its next incarnation (no restart),
//                                          gangReleases+1, gangReleasedAt now, Warning Event
//                                          GangReleased, condition GangWaiting=True naming what
//                                          did not fit
//   released                          --(until gangReleasedAt + GangBackoff)-->  no task pod is
//                                          created (JobPass::gang_hold), then all are created again
//   every task running                --> GangWaiting=False reason GangRunning (if it was set)
//
// The back-off doubles with each release (capped at kMaxGangBackoff) and adds a per-job offset
// below one timeout (from the job's uid), so two jobs released together retry at different
// times and one of them gets the whole room. A replacement after a failure is never held: the
// job had run by then. Pure.
#pragma once

#include <string>

#include "absl/time/time.h"
#include "operator/controller/pass.h"

namespace phalanx::op {

inline constexpr absl::Duration kMaxGangBackoff = absl::Minutes(5);

// How long after its `releases`-th release (1-based) the job `uid` creates its pods again.
absl::Duration GangBackoff(absl::Duration timeout, int releases, const std::string& uid);

Next FormGang(const PlanInputs& in, JobPass& pass);

}  // namespace phalanx::op
