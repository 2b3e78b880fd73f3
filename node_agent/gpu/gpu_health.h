// GPU health classification: the pure rules that turn what NVML reports about one GPU (XID
// events, ECC counters, temperature, whether it can be read at all) into Healthy / Degraded /
// Failed. GpuHealthTracker (gpu_health_tracker.h) gathers the signals each tick and
// ReadInventory (gpu_inventory.h) uses the same rules on a one-off reading. Stateless and
// thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace phalanx::agent {

enum class GpuHealth {
  kHealthy,
  kDegraded,  // usable, but worth a look: new jobs may prefer other nodes
  kFailed,    // must not run work until the GPU is reset or the node is drained
};
// "healthy", "degraded", "failed": the metric label and Node condition value.
absl::string_view GpuHealthName(GpuHealth health);

// Whether XID `xid` means the GPU must be reset (or the node drained) before it runs work again.
// The list, from NVIDIA's XID catalogue and GPU memory error-management guide:
//   48  double-bit ECC error: memory contents lost
//   63  ECC page retirement / row-remap recorded: pending until the GPU is reset
//   64  ECC page retirement / row-remap failed: the bad memory stays in use
//   74  NVLink error: the fabric to peer GPUs is broken, collectives hang or fail
//   79  GPU has fallen off the bus: the device is gone
//   92  high single-bit ECC error rate: memory is failing
//   94  contained ECC error: the affected context died; a reset is required to clear it
//   95  uncontained ECC error: every context on the GPU is affected
//   119 GSP RPC timeout: the GPU System Processor firmware stopped answering
//   120 GSP error: the firmware faulted
// Application-caused XIDs (13, 31, 43, 45...) are counted but do not mark a GPU failed: the
// next job on that GPU is fine.
bool IsFatalXid(uint64_t xid);

struct GpuHealthThresholds {
  // Above this die temperature a GPU is Degraded (it throttles clocks near ~87-90 °C).
  int max_temperature_c = 85;
  // A GPU is Degraded while its corrected ECC count grew by at least this much within the
  // tracker's hold window (a rising rate predicts uncorrectable errors).
  uint64_t corrected_ecc_growth = 1;
};

// What is known about one GPU at one moment.
struct GpuHealthSignals {
  std::optional<int> temperature_c;         // nullopt: not reported
  std::optional<uint64_t> ecc_uncorrected;  // volatile count; nullopt: not supported
  uint64_t ecc_corrected_growth = 0;        // growth within the hold window
  std::set<uint64_t> xids;                  // every XID seen on this GPU since the agent started
  bool lost = false;                        // NVML says the GPU is lost
  std::string read_error;                   // non-empty: a read failed (other than lost)
};

struct GpuHealthVerdict {
  GpuHealth health = GpuHealth::kHealthy;
  std::vector<std::string> reasons;  // one per finding, worst first; empty when healthy
};

// Failed if lost, any fatal XID, or uncorrected ECC > 0; else Degraded if too hot, corrected
// ECC growing, or unreadable; else Healthy.
GpuHealthVerdict ClassifyGpuHealth(const GpuHealthSignals& signals,
                                   const GpuHealthThresholds& thresholds);

}  // namespace phalanx::agent
