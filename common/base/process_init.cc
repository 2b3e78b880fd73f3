#include "common/base/process_init.h"

#include "absl/flags/usage_config.h"
#include "absl/synchronization/mutex.h"
#include "common/base/log.h"

// Set for this file only (common/base/CMakeLists.txt), so a new revision recompiles one file.
#ifndef PHALANX_VERSION
#error "PHALANX_VERSION is defined by CMake for this file"
#endif
#ifndef PHALANX_GIT_REVISION
#define PHALANX_GIT_REVISION "unknown"
#endif

namespace phalanx::base {

std::string_view Version() { return PHALANX_VERSION; }

std::string_view Revision() { return PHALANX_GIT_REVISION; }

std::string VersionLine(std::string_view program) {
  // std::string_view is not absl::string_view in Debian's abseil: no StrCat here.
  std::string line(program);
  line.append(" ").append(Version()).append(" (").append(Revision()).append(")");
  return line;
}

void InitProcess(std::string_view log_component, std::string_view program) {
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  SetLogComponent(log_component);
  absl::FlagsUsageConfig config;
  config.version_string = [line = VersionLine(program)] { return line + "\n"; };
  absl::SetFlagsUsageConfig(config);
}

}  // namespace phalanx::base
