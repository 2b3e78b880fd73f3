// GPU inventory: a snapshot of the node's NVIDIA driver and GPUs (identity, memory, temperature,
// ECC counters, health) read through NvmlApi. The node agent publishes it as metrics and Node
// labels/conditions; GpuHealthTracker keeps a fresh one each tick. Plain data and free
// functions; ReadInventory is as thread-safe as the NvmlApi it is given.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "node_agent/gpu/gpu_health.h"
#include "node_agent/gpu/nvml_api.h"

namespace phalanx::agent {

struct GpuInfo {
  int index = 0;  // NVML index (PCI bus order)
  std::string name;
  std::string uuid;
  std::string pci_bus_id;
  uint64_t memory_total_bytes = 0;
  std::optional<int> temperature_c;       // nullopt: no sensor or not read
  std::optional<uint64_t> ecc_corrected;  // volatile counts; nullopt: ECC not supported
  std::optional<uint64_t> ecc_uncorrected;
  GpuHealth health = GpuHealth::kHealthy;
  std::vector<std::string> health_reasons;  // empty when healthy
};

struct GpuInventory {
  std::string driver_version;   // "550.54.15"
  int cuda_driver_version = 0;  // 12040
  std::string cuda_version;     // "12.4"
  std::vector<GpuInfo> gpus;
};

// One GPU's reading. Reads NVML answers "not supported" for leave their field empty; any other
// failed read is reported here, and the GPU is kept with what could be read.
struct GpuReading {
  GpuInfo info;  // health not set
  bool lost = false;
  std::string read_error;  // the first failed read (other than "lost"), empty if none
};
GpuReading ReadGpu(NvmlApi& nvml, int index);

// Driver, CUDA version and every GPU, each classified with `thresholds` on this one reading (no
// XID history, no ECC trend: GpuHealthTracker adds those). A GPU that cannot be read is listed
// with its health, never dropped. Errors: those of DriverVersion, CudaDriverVersion and
// DeviceCount (see NvmlApi).
absl::StatusOr<GpuInventory> ReadInventory(NvmlApi& nvml,
                                           const GpuHealthThresholds& thresholds = {});

// An ECC count for logs and status: the number, or "not supported".
std::string FormatEccCount(const std::optional<uint64_t>& count);

}  // namespace phalanx::agent
