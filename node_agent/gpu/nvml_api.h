// NvmlApi: the seam between the node agent and NVML (the NVIDIA Management Library). Holds
// exactly the calls the agent's GPU inventory and health tracking need, with opaque handles and
// absl::Status results, so nothing above it includes nvml.h or links libnvidia-ml.
// Implementations: NvmlLoader (nvml_loader.h, dlopen of libnvidia-ml.so.1 at run time) and
// FakeNvml (fake_nvml.h, in memory, for tests and the local cluster's "fake GPU" agents).
//
// NVML errors map to status codes as follows: NOT_SUPPORTED → Unimplemented (e.g. ECC counters
// on a GPU without ECC), GPU_IS_LOST → DataLoss (the GPU fell off the bus; see IsGpuLost),
// UNINITIALIZED / DRIVER_NOT_LOADED → FailedPrecondition, INVALID_ARGUMENT / NOT_FOUND →
// InvalidArgument / NotFound, NO_PERMISSION → PermissionDenied, anything else → Internal.
//
// Thread-safety: implementations are thread-safe (NVML itself is).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace phalanx::agent {

// An opaque nvmlDevice_t (NvmlLoader) or a device id (FakeNvml). 0 is "none".
struct NvmlDevice {
  uintptr_t value = 0;

  bool valid() const { return value != 0; }
  friend bool operator==(const NvmlDevice&, const NvmlDevice&) = default;
};

// An opaque nvmlEventSet_t (NvmlLoader) or an event-set id (FakeNvml). 0 is "none".
struct NvmlEventSet {
  uintptr_t value = 0;

  bool valid() const { return value != 0; }
  friend bool operator==(const NvmlEventSet&, const NvmlEventSet&) = default;
};

enum class EccErrorType {
  kCorrected,    // single-bit, fixed by ECC
  kUncorrected,  // double-bit: the data was lost
};

// One nvmlEventTypeXidCriticalError event.
struct XidEvent {
  int device_index = 0;
  uint64_t xid = 0;

  friend bool operator==(const XidEvent&, const XidEvent&) = default;
};

class NvmlApi {
 public:
  virtual ~NvmlApi() = default;

  // nvmlInit_v2 / nvmlShutdown. NVML counts inits; every Init needs one Shutdown.
  // Errors: FailedPrecondition (no driver loaded), Internal.
  virtual absl::Status Init() = 0;
  virtual absl::Status Shutdown() = 0;

  // nvmlSystemGetDriverVersion, e.g. "550.54.15".
  virtual absl::StatusOr<std::string> DriverVersion() = 0;
  // The newest CUDA version the driver supports, as CUDA encodes it: 12040 for 12.4.
  virtual absl::StatusOr<int> CudaDriverVersion() = 0;

  virtual absl::StatusOr<int> DeviceCount() = 0;
  // InvalidArgument for an index outside [0, DeviceCount()).
  virtual absl::StatusOr<NvmlDevice> DeviceByIndex(int index) = 0;
  // The per-device reads below return DataLoss when the GPU is lost.
  virtual absl::StatusOr<std::string> DeviceName(NvmlDevice device) = 0;
  virtual absl::StatusOr<std::string> DeviceUuid(NvmlDevice device) = 0;
  // Domain:bus:device.function, e.g. "00000000:18:00.0".
  virtual absl::StatusOr<std::string> DevicePciBusId(NvmlDevice device) = 0;
  virtual absl::StatusOr<uint64_t> DeviceMemoryTotalBytes(NvmlDevice device) = 0;
  // The GPU die temperature. Unimplemented when the GPU has no such sensor.
  virtual absl::StatusOr<int> DeviceTemperatureCelsius(NvmlDevice device) = 0;
  // Volatile (since the last driver load) ECC error count. Unimplemented when ECC is off or
  // not supported.
  virtual absl::StatusOr<uint64_t> DeviceEccErrors(NvmlDevice device, EccErrorType type) = 0;

  // nvmlEventSetCreate / nvmlEventSetFree.
  virtual absl::StatusOr<NvmlEventSet> EventSetCreate() = 0;
  virtual absl::Status EventSetFree(NvmlEventSet set) = 0;
  // Registers `device` in `set` for critical XID events. Unimplemented when the device cannot
  // report them.
  virtual absl::Status RegisterXidEvents(NvmlEventSet set, NvmlDevice device) = 0;
  // Every XID event pending on `set`, oldest first, without waiting (nvmlEventSetWait_v2 with
  // a 0 ms timeout until it times out). An empty vector when none is pending.
  virtual absl::StatusOr<std::vector<XidEvent>> PollXidEvents(NvmlEventSet set) = 0;
};

// 12040 → "12.4", 11080 → "11.8"; "unknown" for a non-positive version.
std::string FormatCudaVersion(int cuda_version);

// Whether `status` says the GPU is lost (NVML_ERROR_GPU_IS_LOST).
inline bool IsGpuLost(const absl::Status& status) {
  return status.code() == absl::StatusCode::kDataLoss;
}

}  // namespace phalanx::agent
