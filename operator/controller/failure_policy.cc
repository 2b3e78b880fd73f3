#include "operator/controller/failure_policy.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "operator/controller/accounting.h"

namespace phalanx::op {
namespace {

template <typename T>
bool Contains(const std::vector<T>& v, const T& x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

// The job is about to fail: no task's exit status is awaited any more (task_state.h), so no
// failureReportedAt stays behind on a finished job.
void StopAwaitingExits(JobPass& pass) {
  for (TaskRecord& record : pass.tasks) record.status.failure_reported_at.reset();
}

}  // namespace

bool MadeProgress(const BackoffSpec& backoff, const TrainingJobStatus& previous,
                  absl::Time failed_at) {
  double unbooked = 0;
  if (previous.phase == kPhaseRunning && previous.accounted_until.has_value()) {
    const absl::Time from = std::max(*previous.accounted_until,
                                     previous.last_restart_time.value_or(absl::InfinitePast()));
    unbooked = std::max(0.0, absl::ToDoubleSeconds(failed_at - from));
  }
  return previous.productive_seconds - previous.productive_at_last_restart + unbooked >=
         absl::ToDoubleSeconds(backoff.base);
}

absl::Duration RestartBackoff(const BackoffSpec& backoff, int restarts_so_far) {
  if (restarts_so_far <= 0) return absl::ZeroDuration();
  absl::Duration d = backoff.base;
  for (int i = 1; i < restarts_so_far && d < backoff.max; ++i) d *= 2;
  return std::min(d, backoff.max);
}

FailureClass ClassifyFailure(const FailurePolicy& policy, const PodView& pod) {
  if (!pod.reason.empty() && Contains(policy.fatal_reasons, pod.reason))
    return FailureClass::kFatal;
  if (pod.exit_code.has_value()) {
    if (Contains(policy.fatal_exit_codes, *pod.exit_code)) return FailureClass::kFatal;
    if (!policy.retryable_exit_codes.empty() &&
        !Contains(policy.retryable_exit_codes, *pod.exit_code)) {
      return FailureClass::kFatal;
    }
  }
  return FailureClass::kRetryable;
}

Next FailOnFatal(const PlanInputs& in, JobPass& pass) {
  const std::vector<int> fatal = TasksWith(pass, TaskEvent::kFatal);
  if (fatal.empty()) return Next::kContinue;
  const int i = fatal.front();
  // The task's record says why the job ended, as a restart's would.
  TaskRecord& record = pass.tasks[static_cast<size_t>(i)];
  record.status.last_failure_reason =
      record.failure.reason.empty() ? "Failed" : record.failure.reason;
  record.status.last_exit_code = record.failure.exit_code;
  record.status.last_failure_message = record.failure.message;
  StopAwaitingExits(pass);
  FailJob(in, pass, "FatalFailure",
          absl::StrCat("task ", i, " ", Describe(pass.tasks[static_cast<size_t>(i)].failure),
                       ", which the failure policy treats as fatal"));
  return Next::kDone;
}

Next RestartFailedTasks(const PlanInputs& in, JobPass& pass) {
  const std::vector<int> failed = TasksWith(pass, TaskEvent::kFailed);
  if (failed.empty() || !pass.moved.empty()) return Next::kContinue;
  TrainingJobStatus& st = pass.out.status;
  const FailurePolicy& policy = in.spec.failure_policy;
  auto failure = [&](int i) -> const PodView& {
    return pass.tasks[static_cast<size_t>(i)].failure;
  };
  const bool job_scope = policy.restart_scope == RestartScope::kJob;
  // One restart per pass that replaces failed tasks, however many failed together and in either
  // scope: status.restarts (the RESTARTS column) counts the times the job was restarted, the
  // budget maxRestarts bounds, and the message below names that same count.
  if (st.restarts >= policy.max_restarts) {
    for (int i : failed) {
      TaskStatus& task = pass.tasks[static_cast<size_t>(i)].status;
      task.last_failure_reason = failure(i).reason.empty() ? "Failed" : failure(i).reason;
      task.last_exit_code = failure(i).exit_code;
      task.last_failure_message = failure(i).message;
    }
    const std::vector<int> others(failed.begin() + 1, failed.end());
    StopAwaitingExits(pass);
    FailJob(in, pass, "MaxRestartsExceeded",
            absl::StrCat("task ", failed.front(), " ", Describe(failure(failed.front())),
                         others.empty() ? ""
                                        : absl::StrCat(", and task", others.size() > 1 ? "s " : " ",
                                                       absl::StrJoin(others, ", "), " failed too"),
                         "; the job was already restarted ", st.restarts,
                         st.restarts == 1 ? " time" : " times", " (maxRestarts ",
                         policy.max_restarts, ")"));
    return Next::kDone;
  }
  const absl::Time not_before =
      !st.last_restart_time.has_value() ||
              MadeProgress(policy.backoff, in.previous,
                           GoodputFactsOf(in, pass.tasks).failed_since.value_or(in.now))
          ? in.now
          : *st.last_restart_time + RestartBackoff(policy.backoff, st.restarts);
  if (in.now < not_before) {
    for (int i : failed) pass.tasks[static_cast<size_t>(i)].status.state = TaskState::kBackingOff;
    st.phase = kPhaseRestarting;
    RequeueWithin(pass, not_before - in.now);
    return Next::kDone;
  }
  ++st.restarts;
  st.last_restart_time = in.now;
  st.productive_at_last_restart = st.productive_seconds;
  for (int i : failed) {
    pass.out.events.push_back(
        {true, "TaskRestarted",
         absl::StrCat(
             "task ", i, " ", Describe(failure(i)), "; restarting ",
             job_scope ? "every task" : "it", " as incarnation ",
             NextIncarnation(in, i, pass.tasks[static_cast<size_t>(i)].status.incarnation))});
  }
  if (job_scope) {
    RestartAll(in, pass, "Failed", failed);
  } else {
    for (int i : failed) {
      const PodView& pod = failure(i);
      RestartTask(in, pass, i, pod.reason.empty() ? "Failed" : pod.reason, pod.exit_code);
    }
  }
  // Why each failed, in its pod's (or the coordinator's) words; RestartTask cleared the others'.
  for (int i : failed) {
    pass.tasks[static_cast<size_t>(i)].status.last_failure_message = failure(i).message;
  }
  return Next::kContinue;
}

}  // namespace phalanx::op
