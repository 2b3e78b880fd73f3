#include "node_agent/gpu/gpu_health.h"

#include <algorithm>
#include <array>

#include "absl/strings/str_cat.h"

namespace phalanx::agent {

absl::string_view GpuHealthName(GpuHealth health) {
  switch (health) {
    case GpuHealth::kHealthy:
      return "healthy";
    case GpuHealth::kDegraded:
      return "degraded";
    case GpuHealth::kFailed:
      return "failed";
  }
  return "unknown";
}

bool IsFatalXid(uint64_t xid) {
  static constexpr std::array<uint64_t, 10> kFatal = {48, 63, 64, 74, 79, 92, 94, 95, 119, 120};
  return std::find(kFatal.begin(), kFatal.end(), xid) != kFatal.end();
}

GpuHealthVerdict ClassifyGpuHealth(const GpuHealthSignals& signals,
                                   const GpuHealthThresholds& thresholds) {
  std::vector<std::string> failed;
  std::vector<std::string> degraded;
  if (signals.lost) failed.push_back("GPU is lost (fell off the bus or stopped responding)");
  for (uint64_t xid : signals.xids) {
    if (IsFatalXid(xid)) failed.push_back(absl::StrCat("fatal XID ", xid));
  }
  if (signals.ecc_uncorrected.value_or(0) > 0) {
    failed.push_back(absl::StrCat(*signals.ecc_uncorrected, " uncorrected ECC errors"));
  }
  if (signals.temperature_c && *signals.temperature_c > thresholds.max_temperature_c) {
    degraded.push_back(absl::StrCat("temperature ", *signals.temperature_c, "C above ",
                                    thresholds.max_temperature_c, "C"));
  }
  if (thresholds.corrected_ecc_growth > 0 &&
      signals.ecc_corrected_growth >= thresholds.corrected_ecc_growth) {
    degraded.push_back(absl::StrCat("corrected ECC errors grew by ", signals.ecc_corrected_growth));
  }
  if (!signals.read_error.empty())
    degraded.push_back(absl::StrCat("unreadable: ", signals.read_error));
  GpuHealthVerdict verdict;
  verdict.health = !failed.empty()     ? GpuHealth::kFailed
                   : !degraded.empty() ? GpuHealth::kDegraded
                                       : GpuHealth::kHealthy;
  verdict.reasons = std::move(failed);
  verdict.reasons.insert(verdict.reasons.end(), degraded.begin(), degraded.end());
  return verdict;
}

}  // namespace phalanx::agent
