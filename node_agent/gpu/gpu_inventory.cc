#include "node_agent/gpu/gpu_inventory.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"

namespace phalanx::agent {
namespace {

// Stores a successful read in `*field`; records a failure in `reading` unless NVML answered
// "not supported".
template <typename T, typename Field>
void Take(absl::StatusOr<T> result, Field* field, GpuReading& reading) {
  if (result.ok()) {
    *field = *std::move(result);
  } else if (IsGpuLost(result.status())) {
    reading.lost = true;
  } else if (result.status().code() != absl::StatusCode::kUnimplemented &&
             reading.read_error.empty()) {
    reading.read_error = result.status().ToString();
  }
}

}  // namespace

GpuReading ReadGpu(NvmlApi& nvml, int index) {
  GpuReading reading;
  GpuInfo& info = reading.info;
  info.index = index;
  absl::StatusOr<NvmlDevice> device = nvml.DeviceByIndex(index);
  if (!device.ok()) {
    if (IsGpuLost(device.status())) {
      reading.lost = true;
    } else {
      reading.read_error = device.status().ToString();
    }
    return reading;
  }
  Take(nvml.DeviceName(*device), &info.name, reading);
  Take(nvml.DeviceUuid(*device), &info.uuid, reading);
  Take(nvml.DevicePciBusId(*device), &info.pci_bus_id, reading);
  Take(nvml.DeviceMemoryTotalBytes(*device), &info.memory_total_bytes, reading);
  Take(nvml.DeviceTemperatureCelsius(*device), &info.temperature_c, reading);
  Take(nvml.DeviceEccErrors(*device, EccErrorType::kCorrected), &info.ecc_corrected, reading);
  Take(nvml.DeviceEccErrors(*device, EccErrorType::kUncorrected), &info.ecc_uncorrected, reading);
  return reading;
}

absl::StatusOr<GpuInventory> ReadInventory(NvmlApi& nvml, const GpuHealthThresholds& thresholds) {
  GpuInventory inventory;
  ASSIGN_OR_RETURN(inventory.driver_version, nvml.DriverVersion());
  ASSIGN_OR_RETURN(inventory.cuda_driver_version, nvml.CudaDriverVersion());
  inventory.cuda_version = FormatCudaVersion(inventory.cuda_driver_version);
  ASSIGN_OR_RETURN(const int count, nvml.DeviceCount());
  for (int i = 0; i < count; ++i) {
    GpuReading reading = ReadGpu(nvml, i);
    GpuHealthSignals signals;
    signals.temperature_c = reading.info.temperature_c;
    signals.ecc_uncorrected = reading.info.ecc_uncorrected;
    signals.lost = reading.lost;
    signals.read_error = reading.read_error;
    GpuHealthVerdict verdict = ClassifyGpuHealth(signals, thresholds);
    reading.info.health = verdict.health;
    reading.info.health_reasons = std::move(verdict.reasons);
    inventory.gpus.push_back(std::move(reading.info));
  }
  return inventory;
}

std::string FormatEccCount(const std::optional<uint64_t>& count) {
  return count ? absl::StrCat(*count) : "not supported";
}

}  // namespace phalanx::agent
