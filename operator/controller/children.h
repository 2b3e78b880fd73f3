// Stages "children" and "task pods" (pass.h): the job's fixed children — its token Secret, the
// tasks' headless Service, the coordinator's Service and pod — are created when missing, a
// coordinator pod that ended is deleted (and recreated under the same name once gone: tasks
// reconnect and re-register) after an exponential back-off — 1 s, doubling per restart to 60 s,
// from 1 s again once a coordinator stayed up 10 min — so a coordinator that cannot start does
// not spin; each end is counted once in status.coordinator (restarts, exit code, reason,
// message) and told in a CoordinatorRestarted Warning Event. The coordinator's address is settled
// (by pod IP: only once the pod runs). Pods of older incarnations are deleted, but for the newest
// failed ones failurePolicy.keepFailedPods keeps (failed_pods.h). Then, after the
// task-state stage, each task without a pod gets one at its incarnation, once the coordinator's
// address is known. Names are deterministic (desired_state.h): an AlreadyExists is accepted only
// for a child this job controls (the reconciler checks). A coordinator that refused the token
// Secret's token (auth::kExitTokenMismatch) marks the plan's secret_conflict. The job's TLS
// decision (JobUsesTls) is recorded in status.coordinator.tls here, and the task pod and spare
// stages follow it. Pure.
#pragma once

#include "operator/controller/pass.h"

namespace phalanx::op {

inline constexpr absl::Duration kCoordinatorFirstBackoff = absl::Seconds(1);
inline constexpr absl::Duration kCoordinatorMaxBackoff = absl::Seconds(60);
inline constexpr absl::Duration kCoordinatorBackoffReset = absl::Minutes(10);

// Whether `job`'s Secret holds the TLS files, so that its coordinator serves TLS and its tasks
// verify it (docs/security.md "TLS by default"): status.coordinator.tls once decided. Until
// then, for a job an operator without TLS made children for (its coordinator pod serves no TLS,
// or a ChildrenReady condition is recorded: its Secret exists, without the files, and the
// operator cannot read it to tell) false, else `operator_tls` (--coordinator_tls). So an
// upgraded operator never gives a job's pods TLS files its Secret lacks.
bool JobUsesTls(const TrainingJobStatus& status, const JobObservation& world, bool operator_tls);

Next EnsureJobChildren(const PlanInputs& in, JobPass& pass);
Next EnsureTaskPods(const PlanInputs& in, JobPass& pass);

}  // namespace phalanx::op
