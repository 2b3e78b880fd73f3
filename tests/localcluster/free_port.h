// A TCP port nobody listens on now, on any address (the kernel's pick); the process it is handed
// to binds it a moment later, and a lost race shows as that process failing to start, which its
// starter reports. Thread-safe.
#pragma once

#include "absl/status/statusor.h"

namespace phalanx::localcluster {

// Internal when no socket can be bound.
absl::StatusOr<int> FreeTcpPort();

}  // namespace phalanx::localcluster
