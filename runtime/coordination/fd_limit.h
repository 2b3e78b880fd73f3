// The coordinator's descriptor budget: raising RLIMIT_NOFILE at start and deriving the default
// connection limit from it. Used by the coordinator's main. Thread-safety: call at start-up.
#pragma once

#include <cstdint>

#include "absl/status/statusor.h"

namespace phalanx::coord {

// Raises the soft RLIMIT_NOFILE to the hard limit (the usual soft limit of 1024 is below what
// a job of ~1000 tasks needs) and returns the resulting soft limit. Internal when
// getrlimit/setrlimit fail.
absl::StatusOr<uint64_t> RaiseFdLimitToHard();

// The default --max_connections for a soft limit of `fd_limit`: every connection costs two
// descriptors (the socket and the listener's watch dup), and a reserve stays for everything
// else (gRPC's own descriptors, the HTTP server, the loopback health check, logs): at least
// 64, or 1/8 of the limit. Always at least 1.
int DefaultMaxConnections(uint64_t fd_limit);

}  // namespace phalanx::coord
