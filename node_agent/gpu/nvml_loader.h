// NvmlLoader: the real NvmlApi. Loads libnvidia-ml.so.1 (installed with the NVIDIA driver, not
// the CUDA toolkit) with dlopen at run time, so the agent links nothing of NVIDIA's and runs on
// nodes without GPUs: Load fails with a status that says why, and the agent reports zero GPUs.
// The few NVML types and signatures used are declared in nvml_loader.cc (no nvml.h needed).
//
// Used by the node agent's main.cc; tests use FakeNvml instead, except the `gpu`-labelled
// nvml_real_test.cc.
//
// The library stays loaded for the life of the process; the destructor undoes every Init that
// was not shut down. Thread-safe.
#pragma once

#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "node_agent/gpu/nvml_api.h"

namespace phalanx::agent {

class NvmlLoader final : public NvmlApi {
 public:
  static constexpr char kDefaultPath[] = "libnvidia-ml.so.1";

  // Loads the library at `path` (a bare name goes through the dynamic loader's search path)
  // and initialises NVML. Errors: NotFound (the library cannot be loaded: no NVIDIA driver
  // installed, or not mounted into the container), FailedPrecondition (the library lacks a
  // required symbol: not NVML, or a driver older than R450), Unavailable (nvmlInit_v2 failed:
  // the driver is installed but not loaded, or no GPU is visible).
  static absl::StatusOr<std::unique_ptr<NvmlApi>> Load(std::string path = kDefaultPath);
  ~NvmlLoader() override;

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

 private:
  struct Symbols;  // function pointers resolved with dlsym
  NvmlLoader(std::string path, std::unique_ptr<Symbols> symbols);

  const std::string path_;
  const std::unique_ptr<const Symbols> sym_;
  absl::Mutex mu_;
  int init_count_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace phalanx::agent
