// AwaitSpareAssignment: what a spare process (spec.spares, ADR 0007) does before it is a task.
// It has done everything before phalanx.init() (imports, building its model); here it waits on
// the coordinator, in long polls, until a task fails and the coordinator hands it that task's
// next incarnation and credential. Then it builds its ClientConfig from them and connects like
// any replacement.
//
// The wait for a task has no deadline of its own: a spare waits as long as the job wants it (its
// pod is deleted with the job). What is bounded is how long the coordinator may stay unreachable
// in a row. Thread-compatible; blocks the calling thread.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/base/incarnation.h"
#include "runtime/client/client_config.h"

namespace phalanx::client {

struct SpareIdentity {
  int task_id = 0;
  base::Incarnation incarnation = 0;
  std::string credential;  // the task's: what it registers and calls with now
  int num_tasks = 0;
};

// Errors: DeadlineExceeded (the coordinator was unreachable for `unreachable_timeout` in a
// row), Unauthenticated / PermissionDenied (not a spare credential of this job), InvalidArgument.
// `poll` is each long poll's length (the coordinator caps it).
absl::StatusOr<SpareIdentity> AwaitSpareAssignment(const SpareConfig& config,
                                                   absl::Duration unreachable_timeout,
                                                   absl::Duration poll = absl::Seconds(10));

}  // namespace phalanx::client
