// The checks on a CoordinationService's options, before anything is built from them: task count,
// heartbeat interval below its timeout, positive timeouts and limits. The coordinator's flags
// reach the service only through these. Pure; thread-safe.
#pragma once

#include "absl/status/status.h"
#include "runtime/coordination/service.h"

namespace phalanx::coord {

// InvalidArgument naming the first option that is out of range.
absl::Status ValidateServiceOptions(const CoordinationService::Options& options);

}  // namespace phalanx::coord
