// JSON codecs for the TrainingJob resource (types.h). The operator decodes the spec of every job
// it reconciles with DecodeSpec + ValidateSpec (validation.h: a spec that slipped past the CRD's
// schema and CEL rules, or a cluster without the CRD's validation, gets an `InvalidSpec`
// condition rather than a crash), and reads/writes status with DecodeStatus / EncodeStatus. The
// JSON names are the CRD's (crds/trainingjobs.phalanx.dev.yaml); codec_test and crd_test keep the
// two in step.
//
// Nothing here throws: cpprestsdk's accessors are only called after a type check. Pure
// functions; thread-safe.
#pragma once

#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "operator/api/types.h"

namespace phalanx::op {

// Condition types and reasons the operator writes.
inline constexpr char kConditionInvalidSpec[] = "InvalidSpec";

// Reads job["spec"]. Absent (or null) fields take the defaults in types.h, the same defaults the
// CRD's schema applies; `replicas` has none and is required. Unknown fields are ignored.
// `template` is kept whole.
// Errors: InvalidArgument when `job` is not an object, `spec` is missing or not an object,
// `replicas` is missing, or a field has the wrong JSON type or an unknown enum value. The message
// lists every such problem as "<json path>: <what is wrong>", joined by "; ", e.g.
// `spec.failurePolicy.restartScope: must be Task or Job, got "Pod"`.
// Range checks (replicas >= 1, positive durations, ...) are ValidateSpec's (validation.h).
absl::StatusOr<TrainingJobSpec> DecodeSpec(const Json& job);

// The CRD's spelling of a task state ("Running", "BackingOff", ...; "" for kUnknown), and back
// (an unknown string reads as kUnknown). The only place these strings are written.
std::string TaskStateName(TaskState state);
TaskState ParseTaskState(const std::string& name);
// For test failure messages.
inline void PrintTo(TaskState state, std::ostream* os) {
  *os << (state == TaskState::kUnknown ? "<unknown>" : TaskStateName(state));
}

// The `status` object of a TrainingJob (not the whole job). Optional fields that are unset
// (times, lastExitCode) and empty strings are left out. Times are RFC 3339 in UTC, with a
// fraction of a second only when the time has one, so DecodeStatus(EncodeStatus(s)) == s.
Json EncodeStatus(const TrainingJobStatus& status);

// Reads job["status"]. Tolerant: a missing or mistyped field (or a missing/garbage status) reads
// as its default, a task or condition entry that is not an object is skipped. Never fails.
TrainingJobStatus DecodeStatus(const Json& job);

// The condition of `type`, if present.
std::optional<Condition> FindCondition(const std::vector<Condition>& conditions,
                                       const std::string& type);

// Adds `c` or updates the condition of the same type (metav1 semantics): lastTransitionTime is
// set to `now` (truncated to whole seconds, as Kubernetes writes condition times) when the
// condition is new or its status flips, and kept otherwise; c.last_transition_time is ignored.
// Returns whether anything (status, reason, message, observedGeneration) changed.
bool SetCondition(std::vector<Condition>& conditions, Condition c, absl::Time now);

}  // namespace phalanx::op
