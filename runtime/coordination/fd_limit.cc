#include "runtime/coordination/fd_limit.h"

#include <sys/resource.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"

namespace phalanx::coord {

absl::StatusOr<uint64_t> RaiseFdLimitToHard() {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) {
    return absl::InternalError(absl::StrCat("getrlimit(RLIMIT_NOFILE): ", std::strerror(errno)));
  }
  if (limit.rlim_cur != limit.rlim_max) {
    rlimit raised = limit;
    raised.rlim_cur = limit.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &raised) != 0) {
      return absl::InternalError(
          absl::StrCat("setrlimit(RLIMIT_NOFILE, ", limit.rlim_max, "): ", std::strerror(errno)));
    }
    limit = raised;
  }
  if (limit.rlim_cur == RLIM_INFINITY) return std::numeric_limits<uint64_t>::max();
  return static_cast<uint64_t>(limit.rlim_cur);
}

int DefaultMaxConnections(uint64_t fd_limit) {
  const uint64_t reserve = std::max<uint64_t>(64, fd_limit / 8);
  if (fd_limit <= reserve + 2) return 1;
  const uint64_t connections = (fd_limit - reserve) / 2;
  return static_cast<int>(std::min<uint64_t>(connections, std::numeric_limits<int>::max()));
}

}  // namespace phalanx::coord
