#include "operator/controller/blocked.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "operator/api/codec.h"

namespace phalanx::op {
namespace {

bool EndedOrSuspended(const std::string& phase) {
  return phase == kPhaseSucceeded || phase == kPhaseFailed || phase == kPhaseSuspended;
}

std::string Describe(const ChildFailure& f) {
  return absl::StrCat(f.deleting ? "deleting " : "creating ", f.kind, " ", f.name, ": ",
                      f.status.message());
}

}  // namespace

bool IsPermanentFailure(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kPermissionDenied:
    case absl::StatusCode::kUnauthenticated:
    case absl::StatusCode::kFailedPrecondition:
      return true;
    default:
      return false;
  }
}

StageResult RecordChildOutcome(const TrainingJobStatus& written,
                               const std::vector<ChildFailure>& failures, bool acted,
                               absl::Time now) {
  StageResult out{written, {}};
  TrainingJobStatus& st = out.status;
  if (failures.empty()) {
    const std::optional<Condition> ready = FindCondition(st.conditions, kConditionChildrenReady);
    if (acted || (ready.has_value() && ready->status != "True")) {
      SetCondition(
          st.conditions,
          {kConditionChildrenReady, "True", "ChildrenCreated", "", now, st.observed_generation},
          now);
    }
    return out;
  }
  const ChildFailure& first = failures.front();
  std::string message = Describe(first);
  if (failures.size() > 1) absl::StrAppend(&message, " (and ", failures.size() - 1, " more)");
  const char* reason = first.deleting                        ? kReasonFailedDelete
                       : absl::IsAlreadyExists(first.status) ? kReasonChildConflict
                                                             : kReasonFailedCreate;

  bool permanent = false;
  for (const ChildFailure& f : failures) {
    // A squatted token Secret blocks the whole job: no task pod is created while it stands
    // (they would mount its credentials), unlike a squatted pod, which leaves the rest running.
    permanent |=
        IsPermanentFailure(f.status) || (f.kind == "Secret" && absl::IsAlreadyExists(f.status));
  }
  SetCondition(st.conditions,
               {kConditionChildrenReady, "False", reason, message, now, st.observed_generation},
               now);
  if (permanent && !EndedOrSuspended(st.phase)) st.phase = kPhaseBlocked;
  out.events.push_back({true, reason, message});
  return out;
}

StageResult InvalidSpecStatus(const TrainingJobStatus& previous, int64_t generation,
                              const std::vector<std::string>& problems, absl::Time now) {
  StageResult out{previous, {}};
  TrainingJobStatus& st = out.status;
  st.observed_generation = generation;
  const std::string message = absl::StrJoin(problems, "; ");
  if (SetCondition(st.conditions,
                   {kConditionInvalidSpec, "True", "InvalidSpec", message, now, generation}, now)) {
    out.events.push_back({true, "InvalidSpec", message});
  }
  if (st.phase != kPhaseSucceeded && st.phase != kPhaseFailed) st.phase = kPhaseBlocked;
  return out;
}

bool StaysBlocked(const TrainingJobStatus& previous, bool creates_pending) {
  if (previous.phase != kPhaseBlocked || !creates_pending) return false;
  const std::optional<Condition> ready =
      FindCondition(previous.conditions, kConditionChildrenReady);
  return ready.has_value() && ready->status == "False";
}

}  // namespace phalanx::op
