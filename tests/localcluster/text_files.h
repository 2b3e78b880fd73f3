// Small file helpers the local cluster's harness code shares: whole-file reads and writes (with
// a mode: kubeconfigs and keys are 0600) and the tail of a daemon's log for start-up errors.
// Thread-safe.
#pragma once

#include <sys/types.h>

#include <string>

#include "absl/status/status.h"

namespace phalanx::localcluster {

// Internal naming the path when it cannot be written.
absl::Status WriteTextFile(const std::string& path, const std::string& text, mode_t mode = 0600);
// "" when it cannot be read.
std::string ReadTextFile(const std::string& path);
// The last `lines` lines of a log.
std::string LogTail(const std::string& path, size_t lines = 15);

}  // namespace phalanx::localcluster
