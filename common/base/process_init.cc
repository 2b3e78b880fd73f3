#include "common/base/process_init.h"

#include "absl/synchronization/mutex.h"
#include "common/base/log.h"

namespace phalanx::base {

void InitProcess(std::string_view log_component) {
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  SetLogComponent(log_component);
}

}  // namespace phalanx::base
