#include "runtime/coordination/service_options.h"

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"

namespace phalanx::coord {

absl::Status ValidateServiceOptions(const CoordinationService::Options& options) {
  if (options.num_tasks < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("number of tasks must be at least 1, got ", options.num_tasks));
  }
  if (options.heartbeat_interval <= absl::ZeroDuration() ||
      options.heartbeat_timeout <= options.heartbeat_interval) {
    return absl::InvalidArgumentError(
        absl::StrCat("heartbeat interval (", absl::FormatDuration(options.heartbeat_interval),
                     ") must be positive and shorter than the heartbeat timeout (",
                     absl::FormatDuration(options.heartbeat_timeout), ")"));
  }
  if (options.barrier_default_timeout <= absl::ZeroDuration() ||
      options.shutdown_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("barrier and shutdown timeouts must be positive");
  }
  if (absl::Status s = KvStore::ValidateLimits(options.kv_limits); !s.ok()) return s;
  const BarrierTable::Limits& barriers = options.barrier_limits;
  if (barriers.max_id_bytes == 0 || barriers.max_finished == 0 || barriers.max_pending == 0 ||
      barriers.max_waiting == 0) {
    return absl::InvalidArgumentError("barrier limits must be positive");
  }
  return absl::OkStatus();
}

}  // namespace phalanx::coord
