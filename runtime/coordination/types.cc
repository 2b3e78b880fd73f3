#include "runtime/coordination/types.h"

namespace phalanx::coord {

const char* TaskStateName(TaskState state) {
  switch (state) {
    case TaskState::kUnregistered:
      return "unregistered";
    case TaskState::kConnected:
      return "connected";
    case TaskState::kFailed:
      return "failed";
    case TaskState::kShutdown:
      return "shutdown";
  }
  return "unknown";
}

}  // namespace phalanx::coord
