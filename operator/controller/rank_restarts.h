// Stage "rank restarts" (pass.h): ranks restarted inside their pod. With nprocPerNode > 1 the
// pod's launcher (runtime/python/phalanx/launch.py) restarts a dead rank in place, as its task's
// next coordinator incarnation (pod incarnation I · kLocalIncarnationStride + its restarts), and
// the pod keeps running: the operator sees no pod failure. The coordinator does see the new
// incarnation register, and the link reports it (world.rank_restarts). Here each task (pod)
// counts what it has not counted yet:
//
//   seen for the pod's current incarnation > status.tasks[i].rankRestartsInPod
//     --> rankRestarts and status.rankRestarts grow by the difference, rankRestartsInPod = seen,
//         Warning Event RankRestarted naming the pod and the counts
//
// A replaced pod starts at rankRestartsInPod 0 (pass.h RestartTask); a report on an older pod
// incarnation than the task's current one is old news. Rank restarts do not spend maxRestarts:
// the launcher has its own bound. Pure.
#pragma once

#include "operator/controller/pass.h"

namespace phalanx::op {

Next CountRankRestarts(const PlanInputs& in, JobPass& pass);

}  // namespace phalanx::op
