// Why a job cannot make progress, as pure functions over its status (CONVENTIONS.md: pure
// stages decide, the reconciler writes). Two causes, both shown on the TrainingJob itself rather
// than only in the operator's log (issue 11):
//   - an invalid spec (one that slipped past the CRD): condition InvalidSpec=True, Event
//     InvalidSpec, phase Blocked until a new generation fixes it;
//   - a child the API server refused to create or delete: condition ChildrenReady=False with
//     reason FailedCreate (or FailedDelete) and the server's message, a Warning Event of that
//     reason. A permanent refusal (400/422 invalid, 401/403 forbidden, e.g. Pod Security or a
//     ResourceQuota) also sets phase Blocked; a transient one (429, 5xx, timeouts) leaves the
//     phase alone. Either way the reconciler retries with the work queue's back-off, and the
//     job leaves Blocked by itself once the cause is gone (namespace relabelled, quota freed,
//     RBAC fixed, spec corrected). Blocked is never terminal.
// docs/user-guide.md "Phases" documents these semantics. Pure; thread-safe.
#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "operator/api/types.h"
#include "operator/controller/plan.h"

namespace phalanx::op {

inline constexpr char kConditionChildrenReady[] = "ChildrenReady";
inline constexpr char kReasonFailedCreate[] = "FailedCreate";
inline constexpr char kReasonFailedDelete[] = "FailedDelete";
// A child's name is taken by an object this job does not control (unowned, another job's, or an
// earlier job's of the same name): never adopted; its status is AlreadyExists.
inline constexpr char kReasonChildConflict[] = "ChildConflict";

// One create or delete of a child that the API server did not do.
struct ChildFailure {
  bool deleting = false;
  std::string kind;  // Pod, Service, Secret
  std::string name;
  absl::Status status;  // the client's status, carrying the API server's message
};

// Whether retrying the same request cannot succeed until something else changes: the request
// is invalid (InvalidArgument: 400/422), forbidden (PermissionDenied/Unauthenticated: 401/403,
// which is also how admission plugins such as PodSecurity and ResourceQuota refuse) or refused
// for the object's state (FailedPrecondition). Conflicts, throttling, server errors and
// timeouts are transient.
bool IsPermanentFailure(const absl::Status& status);

struct StageResult {
  TrainingJobStatus status;
  std::vector<EventNote> events;
};

// The status after a pass's creates and deletes: `written` is the status the pass wrote before
// acting, `failures` what the API server refused (in order), `acted` whether the pass created or
// deleted anything. No failure: ChildrenReady=True (only once something was acted on, or to
// clear a False). Failures: ChildrenReady=False naming the first failure (and how many more),
// one Warning Event, and phase Blocked when any failure is permanent and the job is not
// Succeeded, Failed or Suspended. A conflict (AlreadyExists: the name is someone else's) has
// reason ChildConflict (a task whose pod name is taken stays Pending: nothing of the squatter
// counts as the task's).
StageResult RecordChildOutcome(const TrainingJobStatus& written,
                               const std::vector<ChildFailure>& failures, bool acted,
                               absl::Time now);

// The status of a job whose spec is invalid: InvalidSpec=True with `problems` joined by "; "
// (observedGeneration = `generation`), phase Blocked unless the job already ended, and an
// InvalidSpec Warning Event when the condition changed.
StageResult InvalidSpecStatus(const TrainingJobStatus& previous, int64_t generation,
                              const std::vector<std::string>& problems, absl::Time now);

// Whether a pass whose plan still has children to create keeps the job Blocked: the last pass
// was refused permanently (phase Blocked with ChildrenReady=False) and has not yet succeeded.
// Without this the planner would recompute Pending each pass and the failure stage flip it back
// to Blocked: two status writes, two watch events and a hot loop per retry.
bool StaysBlocked(const TrainingJobStatus& previous, bool creates_pending);

}  // namespace phalanx::op
