// The agent's socket folder on the host (the chart's hostPath, which the kubelet creates owned
// by root): handed to the agent's non-root user by `phalanx-agent prepare-socket-dir`, run as the
// DaemonSet's init container. The agent's image has no shell, so this is the agent's own job.
#pragma once

#include <sys/types.h>

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace phalanx::agent {

struct SocketDirOwner {
  uid_t uid = 0;
  gid_t gid = 0;
};

// "65532:65532" → {65532, 65532}. InvalidArgument otherwise.
absl::StatusOr<SocketDirOwner> ParseSocketDirOwner(absl::string_view spec);

// Creates `dir` if missing, then makes it mode 0750 and owned by `owner` (so only the agent's
// user writes the socket and its group may reach it). Needs CAP_CHOWN unless `owner` is the
// caller. Idempotent. Errors name the folder and the failed call.
absl::Status PrepareSocketDir(const std::string& dir, SocketDirOwner owner);

}  // namespace phalanx::agent
