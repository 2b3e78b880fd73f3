#include "node_agent/gpu/fake_nvml.h"

#include <cstdlib>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "common/base/log.h"

namespace phalanx::agent {
namespace {

constexpr int kMaxFakeGpus = 64;

// NVML's product names for the models the local cluster mimics.
std::pair<std::string, uint64_t> ModelNameAndMemory(absl::string_view model) {
  if (model == "H100") return {"NVIDIA H100 80GB HBM3", uint64_t{81559} << 20};
  if (model == "H200") return {"NVIDIA H200", uint64_t{143771} << 20};
  if (model == "A100") return {"NVIDIA A100-SXM4-80GB", uint64_t{81920} << 20};
  return {absl::StrCat("NVIDIA ", model), uint64_t{80} << 30};
}

int IndexOf(NvmlDevice device) { return static_cast<int>(device.value) - 1; }

}  // namespace

std::vector<FakeNvml::Gpu> FakeNvml::MakeGpus(int count, absl::string_view model) {
  auto [name, memory] = ModelNameAndMemory(model);
  std::vector<Gpu> gpus(count);
  for (int i = 0; i < count; ++i) {
    gpus[i].name = name;
    gpus[i].memory_total_bytes = memory;
    gpus[i].uuid = absl::StrFormat("GPU-00000000-0000-0000-0000-%012d", i);
    gpus[i].pci_bus_id = absl::StrFormat("00000000:%02X:00.0", 0x10 + i);
  }
  return gpus;
}

absl::StatusOr<FakeNvml::Options> FakeNvml::ParseSpec(absl::string_view spec) {
  std::vector<absl::string_view> parts = absl::StrSplit(spec, absl::MaxSplits(':', 1));
  int count = 0;
  const bool count_ok = !parts[0].empty() &&
                        parts[0].find_first_not_of("0123456789") == absl::string_view::npos &&
                        absl::SimpleAtoi(parts[0], &count) && count <= kMaxFakeGpus;
  const bool model_ok = parts.size() == 1 || !parts[1].empty();
  if (!count_ok || !model_ok) {
    return absl::InvalidArgumentError(absl::StrCat("fake GPU spec \"", spec,
                                                   "\": want COUNT[:MODEL] with COUNT in 0..",
                                                   kMaxFakeGpus, ", e.g. 8 or 8:H100"));
  }
  Options options;
  options.gpus = MakeGpus(count, parts.size() == 2 ? parts[1] : "H100");
  return options;
}

absl::StatusOr<std::unique_ptr<FakeNvml>> FakeNvml::FromSpec(absl::string_view spec) {
  absl::StatusOr<Options> options = ParseSpec(spec);
  if (!options.ok()) return options.status();
  return std::make_unique<FakeNvml>(*std::move(options));
}

FakeNvml::FakeNvml(Options options) : options_(std::move(options)) {}

absl::Status FakeNvml::FailureLocked(absl::string_view call) const {
  auto it = failures_.find(call);
  return it == failures_.end() ? absl::OkStatus() : it->second;
}

absl::StatusOr<FakeNvml::Gpu*> FakeNvml::GpuLocked(absl::string_view call, NvmlDevice device) {
  if (absl::Status s = FailureLocked(call); !s.ok()) return s;
  const int index = IndexOf(device);
  if (index < 0 || index >= static_cast<int>(options_.gpus.size())) {
    return absl::InvalidArgumentError(absl::StrCat(call, ": invalid device handle"));
  }
  Gpu& gpu = options_.gpus[index];
  if (gpu.lost) return absl::DataLossError(absl::StrCat(call, ": GPU is lost"));
  return &gpu;
}

FakeNvml::Gpu& FakeNvml::GpuAtLocked(int index) {
  if (index < 0 || index >= static_cast<int>(options_.gpus.size())) {
    PHX_LOG(ERROR) << "FakeNvml: no GPU " << index << " (" << options_.gpus.size()
                   << " configured)";
    std::abort();
  }
  return options_.gpus[index];
}

absl::Status FakeNvml::Init() {
  absl::MutexLock lock(&mu_);
  if (absl::Status s = FailureLocked("Init"); !s.ok()) return s;
  ++init_count_;
  return absl::OkStatus();
}

absl::Status FakeNvml::Shutdown() {
  absl::MutexLock lock(&mu_);
  if (absl::Status s = FailureLocked("Shutdown"); !s.ok()) return s;
  if (init_count_ == 0) return absl::FailedPreconditionError("NVML is not initialised");
  --init_count_;
  return absl::OkStatus();
}

absl::StatusOr<std::string> FakeNvml::DriverVersion() {
  absl::MutexLock lock(&mu_);
  if (absl::Status s = FailureLocked("DriverVersion"); !s.ok()) return s;
  return options_.driver_version;
}

absl::StatusOr<int> FakeNvml::CudaDriverVersion() {
  absl::MutexLock lock(&mu_);
  if (absl::Status s = FailureLocked("CudaDriverVersion"); !s.ok()) return s;
  return options_.cuda_driver_version;
}

absl::StatusOr<int> FakeNvml::DeviceCount() {
  absl::MutexLock lock(&mu_);
  if (absl::Status s = FailureLocked("DeviceCount"); !s.ok()) return s;
  return static_cast<int>(options_.gpus.size());
}

absl::StatusOr<NvmlDevice> FakeNvml::DeviceByIndex(int index) {
  absl::MutexLock lock(&mu_);
  if (absl::Status s = FailureLocked("DeviceByIndex"); !s.ok()) return s;
  if (index < 0 || index >= static_cast<int>(options_.gpus.size())) {
    return absl::InvalidArgumentError(absl::StrCat("GPU index ", index));
  }
  return NvmlDevice{static_cast<uintptr_t>(index) + 1};
}

absl::StatusOr<std::string> FakeNvml::DeviceName(NvmlDevice device) {
  absl::MutexLock lock(&mu_);
  absl::StatusOr<Gpu*> gpu = GpuLocked("DeviceName", device);
  if (!gpu.ok()) return gpu.status();
  return (*gpu)->name;
}

absl::StatusOr<std::string> FakeNvml::DeviceUuid(NvmlDevice device) {
  absl::MutexLock lock(&mu_);
  absl::StatusOr<Gpu*> gpu = GpuLocked("DeviceUuid", device);
  if (!gpu.ok()) return gpu.status();
  return (*gpu)->uuid;
}

absl::StatusOr<std::string> FakeNvml::DevicePciBusId(NvmlDevice device) {
  absl::MutexLock lock(&mu_);
  absl::StatusOr<Gpu*> gpu = GpuLocked("DevicePciBusId", device);
  if (!gpu.ok()) return gpu.status();
  return (*gpu)->pci_bus_id;
}

absl::StatusOr<uint64_t> FakeNvml::DeviceMemoryTotalBytes(NvmlDevice device) {
  absl::MutexLock lock(&mu_);
  absl::StatusOr<Gpu*> gpu = GpuLocked("DeviceMemoryTotalBytes", device);
  if (!gpu.ok()) return gpu.status();
  return (*gpu)->memory_total_bytes;
}

absl::StatusOr<int> FakeNvml::DeviceTemperatureCelsius(NvmlDevice device) {
  absl::MutexLock lock(&mu_);
  absl::StatusOr<Gpu*> gpu = GpuLocked("DeviceTemperatureCelsius", device);
  if (!gpu.ok()) return gpu.status();
  if (!(*gpu)->temperature_c) return absl::UnimplementedError("no temperature sensor");
  return *(*gpu)->temperature_c;
}

absl::StatusOr<uint64_t> FakeNvml::DeviceEccErrors(NvmlDevice device, EccErrorType type) {
  absl::MutexLock lock(&mu_);
  absl::StatusOr<Gpu*> gpu = GpuLocked("DeviceEccErrors", device);
  if (!gpu.ok()) return gpu.status();
  const std::optional<uint64_t>& count =
      type == EccErrorType::kCorrected ? (*gpu)->ecc_corrected : (*gpu)->ecc_uncorrected;
  if (!count) return absl::UnimplementedError("ECC not supported");
  return *count;
}

absl::StatusOr<NvmlEventSet> FakeNvml::EventSetCreate() {
  absl::MutexLock lock(&mu_);
  if (absl::Status s = FailureLocked("EventSetCreate"); !s.ok()) return s;
  const uintptr_t id = next_event_set_++;
  event_sets_[id];
  return NvmlEventSet{id};
}

absl::Status FakeNvml::EventSetFree(NvmlEventSet set) {
  absl::MutexLock lock(&mu_);
  if (absl::Status s = FailureLocked("EventSetFree"); !s.ok()) return s;
  if (event_sets_.erase(set.value) == 0) return absl::InvalidArgumentError("unknown event set");
  return absl::OkStatus();
}

absl::Status FakeNvml::RegisterXidEvents(NvmlEventSet set, NvmlDevice device) {
  absl::MutexLock lock(&mu_);
  absl::StatusOr<Gpu*> gpu = GpuLocked("RegisterXidEvents", device);
  if (!gpu.ok()) return gpu.status();
  auto it = event_sets_.find(set.value);
  if (it == event_sets_.end()) return absl::InvalidArgumentError("unknown event set");
  if (!(*gpu)->xid_events_supported) return absl::UnimplementedError("XID events not supported");
  it->second.devices.insert(IndexOf(device));
  return absl::OkStatus();
}

absl::StatusOr<std::vector<XidEvent>> FakeNvml::PollXidEvents(NvmlEventSet set) {
  absl::MutexLock lock(&mu_);
  if (absl::Status s = FailureLocked("PollXidEvents"); !s.ok()) return s;
  auto it = event_sets_.find(set.value);
  if (it == event_sets_.end()) return absl::InvalidArgumentError("unknown event set");
  std::vector<XidEvent> events(it->second.pending.begin(), it->second.pending.end());
  it->second.pending.clear();
  return events;
}

void FakeNvml::SetTemperature(int index, std::optional<int> celsius) {
  absl::MutexLock lock(&mu_);
  GpuAtLocked(index).temperature_c = celsius;
}

void FakeNvml::AddEccErrors(int index, EccErrorType type, uint64_t count) {
  absl::MutexLock lock(&mu_);
  Gpu& gpu = GpuAtLocked(index);
  std::optional<uint64_t>& counter =
      type == EccErrorType::kCorrected ? gpu.ecc_corrected : gpu.ecc_uncorrected;
  counter = counter.value_or(0) + count;
}

void FakeNvml::SetLost(int index, bool lost) {
  absl::MutexLock lock(&mu_);
  GpuAtLocked(index).lost = lost;
}

void FakeNvml::InjectXid(int index, uint64_t xid) {
  absl::MutexLock lock(&mu_);
  GpuAtLocked(index);  // checks the index
  for (auto& [id, set] : event_sets_) {
    if (set.devices.contains(index)) set.pending.push_back(XidEvent{index, xid});
  }
}

void FakeNvml::FailCall(absl::string_view call, absl::Status error) {
  absl::MutexLock lock(&mu_);
  if (error.ok()) {
    failures_.erase(std::string(call));
  } else {
    failures_[std::string(call)] = std::move(error);
  }
}

int FakeNvml::init_count() const {
  absl::MutexLock lock(&mu_);
  return init_count_;
}

int FakeNvml::live_event_sets() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(event_sets_.size());
}

}  // namespace phalanx::agent
