// Stages "fatal" and "failures" (pass.h): spec.failurePolicy.
//   - A failure the policy treats as fatal (a fatal exit code or reason, or an exit code outside
//     a non-empty retryable list) fails the job at once (FatalFailure).
//   - Other failures restart: restartScope Task replaces only the failed tasks, Job every task,
//     each as its next incarnation. Each restart spends one of maxRestarts (a Job-scope restart
//     one in all); past it the job fails (MaxRestartsExceeded). Restart k+1 waits
//     RestartBackoff(k) after the last one (tasks BackingOff, phase Restarting meanwhile),
//     unless the job made progress since (MadeProgress): the back-off is for crash loops, and a
//     long job with a failure now and then must not have each in-place recovery wait out an
//     ever longer back-off while its survivors idle (issue 35).
//   - A pass that moved preempted tasks restarts no failures: they are acted on next pass.
// Pure.
#pragma once

#include "absl/time/time.h"
#include "operator/controller/pass.h"

namespace phalanx::op {

// The wait before restart number `restarts_so_far + 1`: none for the first, then base·2^(k-1)
// capped at max.
absl::Duration RestartBackoff(const BackoffSpec& backoff, int restarts_so_far);

// Whether the job made progress since its last restart (or preemption move): at least
// `backoff.base` of productive time (every task running) since then. A task that fails again
// within that, before the job trained that long, is a crash loop: it waits. `previous` is the
// status as the pass found it: its Running time since `previous.accounted_until` is not booked
// yet (accounting.h books at most every kAccountingPeriod) and counts too, from the last
// restart on until `failed_at` (when the failure happened, as far as known: the time between
// it and its detection, a heartbeat timeout, is no progress), so a failure 10-30 s into a run is
// not taken for a crash loop, and a task that hangs at once after each restart still is.
bool MadeProgress(const BackoffSpec& backoff, const TrainingJobStatus& previous,
                  absl::Time failed_at);

enum class FailureClass { kRetryable, kFatal };
FailureClass ClassifyFailure(const FailurePolicy& policy, const PodView& pod);

Next FailOnFatal(const PlanInputs& in, JobPass& pass);
Next RestartFailedTasks(const PlanInputs& in, JobPass& pass);

}  // namespace phalanx::op
