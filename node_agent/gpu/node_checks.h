// Node checks: small, mostly pure checks of the node's GPU environment, each giving a
// CheckResult the node agent exports as a metric (`ok` as 0/1, labelled by `name`) and as a
// Node condition (`message` as its message). Used by the node agent at start-up and on its
// periodic tick, and by the worker-facing CUDA guard. Free functions; thread-safe.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "node_agent/gpu/gpu_inventory.h"

namespace phalanx::agent {

struct CheckResult {
  std::string name;  // stable, metric-label safe: "transparent_hugepages", ...
  bool ok = true;
  std::string message;

  friend bool operator==(const CheckResult&, const CheckResult&) = default;
};

inline constexpr char kThpEnabledPath[] = "/sys/kernel/mm/transparent_hugepage/enabled";

// The selected value of a THP sysfs file: "[always] madvise never" → "always".
// InvalidArgument unless exactly one non-empty bracketed word is present.
absl::StatusOr<std::string> ParseThpSetting(absl::string_view contents);

// "transparent_hugepages": not ok (a warning) when THP is `always`, because khugepaged's
// compaction of large training-process heaps causes latency spikes in steps and collectives;
// `madvise` (recommended) or `never` are ok. An unreadable or malformed file is ok with a
// "not checked" message: a missing optimisation must not mark the node unhealthy.
CheckResult CheckTransparentHugePages(const std::string& path = kThpEnabledPath);

// "nvidia_driver": ok when NVML loaded (`nvml_status` OK) and the inventory was read; the
// message names the driver, its CUDA version and the GPU count, or why there is no driver.
CheckResult CheckNvidiaDriver(const absl::Status& nvml_status, const GpuInventory& inventory);

// "MAJOR.MINOR" (a patch part is ignored; "12" means 12.0) in CUDA's encoding: "12.4" → 12040.
// InvalidArgument otherwise.
absl::StatusOr<int> ParseCudaVersion(absl::string_view version);

// "cuda_compatibility": ok when the driver's CUDA version (CudaDriverVersion(), e.g. 12020) is
// at least the `requested` major.minor ("12.4"); otherwise the message says
// "driver supports CUDA 12.2 but the job asks for 12.4".
CheckResult CheckCudaCompatibility(int driver_cuda_version, absl::string_view requested);

}  // namespace phalanx::agent
