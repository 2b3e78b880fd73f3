// FakeNvml: an in-memory NvmlApi with N configurable GPUs. Used by the GPU tests and by the node
// agent's "fake GPU" mode on the local cluster (`--fake_gpus=8:H100`), so it lives in a normal
// library (phalanx_agent_fake_gpu) and does not depend on gtest.
//
// Controls: change a GPU's temperature or ECC counts, inject XID events (delivered to every
// event set the GPU is registered in, as NVML does), mark a GPU lost (its reads fail with
// DataLoss), and make any call fail with a given status. Init/Shutdown are counted; calls
// work whether or not Init was called, to keep tests short.
//
// Thread-safe.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "node_agent/gpu/nvml_api.h"

namespace phalanx::agent {

class FakeNvml final : public NvmlApi {
 public:
  struct Gpu {
    std::string name = "NVIDIA H100 80GB HBM3";
    std::string uuid;        // MakeGpus fills it: GPU-00000000-0000-0000-0000-00000000000N
    std::string pci_bus_id;  // MakeGpus fills it: 00000000:1N:00.0
    uint64_t memory_total_bytes = uint64_t{80} << 30;
    std::optional<int> temperature_c = 40;        // nullopt: no sensor (Unimplemented)
    std::optional<uint64_t> ecc_corrected = 0;    // nullopt: ECC not supported
    std::optional<uint64_t> ecc_uncorrected = 0;  // nullopt: ECC not supported
    bool xid_events_supported = true;
    bool lost = false;  // every per-device read returns DataLoss
  };
  struct Options {
    std::vector<Gpu> gpus;
    std::string driver_version = "550.54.15";
    int cuda_driver_version = 12040;
  };

  // `count` GPUs named after `model` ("H100" → "NVIDIA H100"), with distinct UUIDs and PCI ids.
  static std::vector<Gpu> MakeGpus(int count, absl::string_view model = "H100");
  // Parses a command-line spec "COUNT[:MODEL]" ("8", "8:H100", "0"). InvalidArgument otherwise.
  static absl::StatusOr<Options> ParseSpec(absl::string_view spec);
  static absl::StatusOr<std::unique_ptr<FakeNvml>> FromSpec(absl::string_view spec);

  explicit FakeNvml(Options options);

  absl::Status Init() override;
  absl::Status Shutdown() override;
  absl::StatusOr<std::string> DriverVersion() override;
  absl::StatusOr<int> CudaDriverVersion() override;
  absl::StatusOr<int> DeviceCount() override;
  absl::StatusOr<NvmlDevice> DeviceByIndex(int index) override;
  absl::StatusOr<std::string> DeviceName(NvmlDevice device) override;
  absl::StatusOr<std::string> DeviceUuid(NvmlDevice device) override;
  absl::StatusOr<std::string> DevicePciBusId(NvmlDevice device) override;
  absl::StatusOr<uint64_t> DeviceMemoryTotalBytes(NvmlDevice device) override;
  absl::StatusOr<int> DeviceTemperatureCelsius(NvmlDevice device) override;
  absl::StatusOr<uint64_t> DeviceEccErrors(NvmlDevice device, EccErrorType type) override;
  absl::StatusOr<NvmlEventSet> EventSetCreate() override;
  absl::Status EventSetFree(NvmlEventSet set) override;
  absl::Status RegisterXidEvents(NvmlEventSet set, NvmlDevice device) override;
  absl::StatusOr<std::vector<XidEvent>> PollXidEvents(NvmlEventSet set) override;

  // Test controls. `index` must name a configured GPU.
  void SetTemperature(int index, std::optional<int> celsius);
  void AddEccErrors(int index, EccErrorType type, uint64_t count);
  void SetLost(int index, bool lost);
  void InjectXid(int index, uint64_t xid);
  // From now on the call named `call` (the NvmlApi method name, e.g. "DeviceCount") returns
  // `error`; an OK status clears it.
  void FailCall(absl::string_view call, absl::Status error);

  int init_count() const;  // Init calls minus Shutdown calls
  int live_event_sets() const;

 private:
  struct EventSet {
    std::set<int> devices;
    std::deque<XidEvent> pending;
  };

  absl::Status FailureLocked(absl::string_view call) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // The GPU behind `device` after checking `call`'s injected failure and lost GPUs.
  absl::StatusOr<Gpu*> GpuLocked(absl::string_view call, NvmlDevice device)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  Gpu& GpuAtLocked(int index) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  Options options_ ABSL_GUARDED_BY(mu_);
  int init_count_ ABSL_GUARDED_BY(mu_) = 0;
  uintptr_t next_event_set_ ABSL_GUARDED_BY(mu_) = 1;
  std::map<uintptr_t, EventSet> event_sets_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, absl::Status, std::less<>> failures_ ABSL_GUARDED_BY(mu_);
};

}  // namespace phalanx::agent
