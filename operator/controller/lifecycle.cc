#include "operator/controller/lifecycle.h"

#include "absl/strings/str_cat.h"
#include "operator/api/codec.h"

namespace phalanx::op {

Next ExpireFinishedJob(const PlanInputs& in, JobPass& pass) {
  const TrainingJobStatus& st = pass.out.status;
  if (!in.spec.ttl_after_finished.has_value() || !IsTerminal(st.phase) ||
      !st.completion_time.has_value()) {
    return Next::kContinue;
  }
  const absl::Time expires = *st.completion_time + *in.spec.ttl_after_finished;
  if (in.now < expires) {
    RequeueWithin(pass, expires - in.now);
    return Next::kContinue;
  }
  if (!pass.out.delete_job) {
    pass.out.delete_job = true;
    pass.out.events.push_back(
        {false, "TTLExpired",
         absl::StrCat(
             "the job ", st.phase == kPhaseSucceeded ? "succeeded" : "failed", " ",
             absl::ToInt64Seconds(in.now - *st.completion_time), " s ago (ttlSecondsAfterFinished ",
             absl::ToInt64Seconds(*in.spec.ttl_after_finished), "): deleting it and its pods")});
  }
  return Next::kContinue;  // "suspend" still settles what is left until the job is gone
}

Next EnforceActiveDeadline(const PlanInputs& in, JobPass& pass) {
  if (!in.spec.active_deadline.has_value()) return Next::kContinue;
  const std::optional<Condition> suspended = FindCondition(pass.out.status.conditions, "Suspended");
  const absl::Time active_since = suspended.has_value() ? suspended->last_transition_time : in.now;
  const absl::Time deadline = active_since + *in.spec.active_deadline;
  if (in.now < deadline) {
    RequeueWithin(pass, deadline - in.now);
    return Next::kContinue;
  }
  FailJob(in, pass, "DeadlineExceeded",
          absl::StrCat("the job was active for ", absl::ToInt64Seconds(in.now - active_since),
                       " s, past spec.activeDeadlineSeconds (",
                       absl::ToInt64Seconds(*in.spec.active_deadline), " s)"));
  return Next::kDone;
}

}  // namespace phalanx::op
