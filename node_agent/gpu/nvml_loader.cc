#include "node_agent/gpu/nvml_loader.h"

#include <dlfcn.h>

#include <cstring>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace phalanx::agent {
namespace {

// The slice of nvml.h this file needs. These types and values are part of NVML's stable ABI.
using nvmlReturn_t = int;
using nvmlDevice_t = struct nvmlDevice_st*;
using nvmlEventSet_t = struct nvmlEventSet_st*;

constexpr nvmlReturn_t NVML_SUCCESS = 0;
constexpr nvmlReturn_t NVML_ERROR_UNINITIALIZED = 1;
constexpr nvmlReturn_t NVML_ERROR_INVALID_ARGUMENT = 2;
constexpr nvmlReturn_t NVML_ERROR_NOT_SUPPORTED = 3;
constexpr nvmlReturn_t NVML_ERROR_NO_PERMISSION = 4;
constexpr nvmlReturn_t NVML_ERROR_NOT_FOUND = 6;
constexpr nvmlReturn_t NVML_ERROR_DRIVER_NOT_LOADED = 9;
constexpr nvmlReturn_t NVML_ERROR_TIMEOUT = 10;
constexpr nvmlReturn_t NVML_ERROR_GPU_IS_LOST = 15;

constexpr unsigned long long nvmlEventTypeXidCriticalError = 0x8;  // NOLINT
constexpr int NVML_TEMPERATURE_GPU = 0;
constexpr int NVML_MEMORY_ERROR_TYPE_CORRECTED = 0;
constexpr int NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1;
constexpr int NVML_VOLATILE_ECC = 0;
constexpr unsigned int kNameBufferSize = 96;           // NVML_DEVICE_NAME_V2_BUFFER_SIZE
constexpr unsigned int kUuidBufferSize = 96;           // NVML_DEVICE_UUID_V2_BUFFER_SIZE
constexpr unsigned int kDriverVersionBufferSize = 80;  // NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE
// Bounds one PollXidEvents call, so a GPU storming events cannot stall the agent's tick.
constexpr int kMaxEventsPerPoll = 1024;

struct nvmlPciInfo_t {
  char busIdLegacy[16];
  unsigned int domain;
  unsigned int bus;
  unsigned int device;
  unsigned int pciDeviceId;
  unsigned int pciSubSystemId;
  char busId[32];
};

struct nvmlMemory_t {
  unsigned long long total;  // NOLINT
  unsigned long long free;   // NOLINT
  unsigned long long used;   // NOLINT
};

struct nvmlEventData_t {
  nvmlDevice_t device;
  unsigned long long eventType;  // NOLINT
  unsigned long long eventData;  // NOLINT
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
};

nvmlDevice_t ToDevice(NvmlDevice d) { return reinterpret_cast<nvmlDevice_t>(d.value); }
nvmlEventSet_t ToSet(NvmlEventSet s) { return reinterpret_cast<nvmlEventSet_t>(s.value); }

}  // namespace

struct NvmlLoader::Symbols {
  nvmlReturn_t (*init)() = nullptr;
  nvmlReturn_t (*shutdown)() = nullptr;
  const char* (*error_string)(nvmlReturn_t) = nullptr;
  nvmlReturn_t (*driver_version)(char*, unsigned int) = nullptr;
  nvmlReturn_t (*cuda_driver_version)(int*) = nullptr;
  nvmlReturn_t (*device_count)(unsigned int*) = nullptr;
  nvmlReturn_t (*handle_by_index)(unsigned int, nvmlDevice_t*) = nullptr;
  nvmlReturn_t (*device_index)(nvmlDevice_t, unsigned int*) = nullptr;
  nvmlReturn_t (*name)(nvmlDevice_t, char*, unsigned int) = nullptr;
  nvmlReturn_t (*uuid)(nvmlDevice_t, char*, unsigned int) = nullptr;
  nvmlReturn_t (*pci_info)(nvmlDevice_t, nvmlPciInfo_t*) = nullptr;
  nvmlReturn_t (*memory_info)(nvmlDevice_t, nvmlMemory_t*) = nullptr;
  nvmlReturn_t (*temperature)(nvmlDevice_t, int, unsigned int*) = nullptr;
  nvmlReturn_t (*total_ecc_errors)(nvmlDevice_t, int, int,
                                   unsigned long long*) = nullptr;  // NOLINT
  nvmlReturn_t (*event_set_create)(nvmlEventSet_t*) = nullptr;
  nvmlReturn_t (*event_set_free)(nvmlEventSet_t) = nullptr;
  nvmlReturn_t (*register_events)(nvmlDevice_t, unsigned long long,
                                  nvmlEventSet_t) = nullptr;  // NOLINT
  nvmlReturn_t (*event_set_wait)(nvmlEventSet_t, nvmlEventData_t*, unsigned int) = nullptr;

  absl::Status Check(nvmlReturn_t r, absl::string_view what) const {
    if (r == NVML_SUCCESS) return absl::OkStatus();
    const char* text = error_string != nullptr ? error_string(r) : nullptr;
    const std::string message =
        absl::StrCat(what, ": ", text != nullptr ? std::string(text) : absl::StrCat("error ", r));
    switch (r) {
      case NVML_ERROR_NOT_SUPPORTED:
        return absl::UnimplementedError(message);
      case NVML_ERROR_GPU_IS_LOST:
        return absl::DataLossError(message);
      case NVML_ERROR_UNINITIALIZED:
      case NVML_ERROR_DRIVER_NOT_LOADED:
        return absl::FailedPreconditionError(message);
      case NVML_ERROR_INVALID_ARGUMENT:
        return absl::InvalidArgumentError(message);
      case NVML_ERROR_NOT_FOUND:
        return absl::NotFoundError(message);
      case NVML_ERROR_NO_PERMISSION:
        return absl::PermissionDeniedError(message);
      default:
        return absl::InternalError(message);
    }
  }
};

absl::StatusOr<std::unique_ptr<NvmlApi>> NvmlLoader::Load(std::string path) {
  void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    const char* err = dlerror();
    return absl::NotFoundError(absl::StrCat(
        "no NVIDIA driver: cannot load NVML (", path, "): ", err != nullptr ? err : "unknown",
        "; install the NVIDIA driver or mount its libraries into the agent's container"));
  }
  auto sym = std::make_unique<Symbols>();
  std::vector<std::string> missing;
  auto resolve = [&](auto& fn, const char* name) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, name));
    if (fn == nullptr) missing.push_back(name);
  };
  resolve(sym->init, "nvmlInit_v2");
  resolve(sym->shutdown, "nvmlShutdown");
  resolve(sym->error_string, "nvmlErrorString");
  resolve(sym->driver_version, "nvmlSystemGetDriverVersion");
  resolve(sym->device_count, "nvmlDeviceGetCount_v2");
  resolve(sym->handle_by_index, "nvmlDeviceGetHandleByIndex_v2");
  resolve(sym->device_index, "nvmlDeviceGetIndex");
  resolve(sym->name, "nvmlDeviceGetName");
  resolve(sym->uuid, "nvmlDeviceGetUUID");
  resolve(sym->pci_info, "nvmlDeviceGetPciInfo_v3");
  resolve(sym->memory_info, "nvmlDeviceGetMemoryInfo");
  resolve(sym->temperature, "nvmlDeviceGetTemperature");
  resolve(sym->total_ecc_errors, "nvmlDeviceGetTotalEccErrors");
  resolve(sym->event_set_create, "nvmlEventSetCreate");
  resolve(sym->event_set_free, "nvmlEventSetFree");
  resolve(sym->register_events, "nvmlDeviceRegisterEvents");
  resolve(sym->event_set_wait, "nvmlEventSetWait_v2");
  // _v2 reads the version from the kernel driver; older drivers only have the libcuda-based one.
  sym->cuda_driver_version = reinterpret_cast<decltype(sym->cuda_driver_version)>(
      dlsym(lib, "nvmlSystemGetCudaDriverVersion_v2"));
  if (sym->cuda_driver_version == nullptr)
    resolve(sym->cuda_driver_version, "nvmlSystemGetCudaDriverVersion");
  if (!missing.empty()) {
    dlclose(lib);
    return absl::FailedPreconditionError(
        absl::StrCat(path, " lacks ", absl::StrJoin(missing, ", "),
                     "; it is not NVML, or the NVIDIA driver is older than R450"));
  }
  auto loader = std::unique_ptr<NvmlLoader>(new NvmlLoader(path, std::move(sym)));
  if (absl::Status s = loader->Init(); !s.ok()) {
    return absl::UnavailableError(absl::StrCat("no NVIDIA driver: ", s.message()));
  }
  return loader;
}

NvmlLoader::NvmlLoader(std::string path, std::unique_ptr<Symbols> symbols)
    : path_(std::move(path)), sym_(std::move(symbols)) {}

NvmlLoader::~NvmlLoader() {
  absl::MutexLock lock(&mu_);
  for (; init_count_ > 0; --init_count_) sym_->shutdown();
}

absl::Status NvmlLoader::Init() {
  absl::MutexLock lock(&mu_);
  if (absl::Status s = sym_->Check(sym_->init(), "nvmlInit_v2"); !s.ok()) return s;
  ++init_count_;
  return absl::OkStatus();
}

absl::Status NvmlLoader::Shutdown() {
  absl::MutexLock lock(&mu_);
  if (init_count_ == 0) return absl::FailedPreconditionError("NVML is not initialised");
  if (absl::Status s = sym_->Check(sym_->shutdown(), "nvmlShutdown"); !s.ok()) return s;
  --init_count_;
  return absl::OkStatus();
}

absl::StatusOr<std::string> NvmlLoader::DriverVersion() {
  char buf[kDriverVersionBufferSize] = {};
  if (absl::Status s =
          sym_->Check(sym_->driver_version(buf, sizeof(buf)), "nvmlSystemGetDriverVersion");
      !s.ok()) {
    return s;
  }
  return std::string(buf, strnlen(buf, sizeof(buf)));
}

absl::StatusOr<int> NvmlLoader::CudaDriverVersion() {
  int version = 0;
  if (absl::Status s =
          sym_->Check(sym_->cuda_driver_version(&version), "nvmlSystemGetCudaDriverVersion");
      !s.ok()) {
    return s;
  }
  return version;
}

absl::StatusOr<int> NvmlLoader::DeviceCount() {
  unsigned int count = 0;
  if (absl::Status s = sym_->Check(sym_->device_count(&count), "nvmlDeviceGetCount_v2"); !s.ok()) {
    return s;
  }
  return static_cast<int>(count);
}

absl::StatusOr<NvmlDevice> NvmlLoader::DeviceByIndex(int index) {
  if (index < 0) return absl::InvalidArgumentError(absl::StrCat("GPU index ", index));
  nvmlDevice_t device = nullptr;
  if (absl::Status s = sym_->Check(sym_->handle_by_index(static_cast<unsigned int>(index), &device),
                                   absl::StrCat("nvmlDeviceGetHandleByIndex_v2(", index, ")"));
      !s.ok()) {
    return s;
  }
  return NvmlDevice{reinterpret_cast<uintptr_t>(device)};
}

absl::StatusOr<std::string> NvmlLoader::DeviceName(NvmlDevice device) {
  char buf[kNameBufferSize] = {};
  if (absl::Status s =
          sym_->Check(sym_->name(ToDevice(device), buf, sizeof(buf)), "nvmlDeviceGetName");
      !s.ok()) {
    return s;
  }
  return std::string(buf, strnlen(buf, sizeof(buf)));
}

absl::StatusOr<std::string> NvmlLoader::DeviceUuid(NvmlDevice device) {
  char buf[kUuidBufferSize] = {};
  if (absl::Status s =
          sym_->Check(sym_->uuid(ToDevice(device), buf, sizeof(buf)), "nvmlDeviceGetUUID");
      !s.ok()) {
    return s;
  }
  return std::string(buf, strnlen(buf, sizeof(buf)));
}

absl::StatusOr<std::string> NvmlLoader::DevicePciBusId(NvmlDevice device) {
  nvmlPciInfo_t info = {};
  if (absl::Status s =
          sym_->Check(sym_->pci_info(ToDevice(device), &info), "nvmlDeviceGetPciInfo_v3");
      !s.ok()) {
    return s;
  }
  return std::string(info.busId, strnlen(info.busId, sizeof(info.busId)));
}

absl::StatusOr<uint64_t> NvmlLoader::DeviceMemoryTotalBytes(NvmlDevice device) {
  nvmlMemory_t memory = {};
  if (absl::Status s =
          sym_->Check(sym_->memory_info(ToDevice(device), &memory), "nvmlDeviceGetMemoryInfo");
      !s.ok()) {
    return s;
  }
  return static_cast<uint64_t>(memory.total);
}

absl::StatusOr<int> NvmlLoader::DeviceTemperatureCelsius(NvmlDevice device) {
  unsigned int celsius = 0;
  if (absl::Status s =
          sym_->Check(sym_->temperature(ToDevice(device), NVML_TEMPERATURE_GPU, &celsius),
                      "nvmlDeviceGetTemperature");
      !s.ok()) {
    return s;
  }
  return static_cast<int>(celsius);
}

absl::StatusOr<uint64_t> NvmlLoader::DeviceEccErrors(NvmlDevice device, EccErrorType type) {
  const int error_type = type == EccErrorType::kCorrected ? NVML_MEMORY_ERROR_TYPE_CORRECTED
                                                          : NVML_MEMORY_ERROR_TYPE_UNCORRECTED;
  unsigned long long count = 0;  // NOLINT
  if (absl::Status s = sym_->Check(
          sym_->total_ecc_errors(ToDevice(device), error_type, NVML_VOLATILE_ECC, &count),
          "nvmlDeviceGetTotalEccErrors");
      !s.ok()) {
    return s;
  }
  return static_cast<uint64_t>(count);
}

absl::StatusOr<NvmlEventSet> NvmlLoader::EventSetCreate() {
  nvmlEventSet_t set = nullptr;
  if (absl::Status s = sym_->Check(sym_->event_set_create(&set), "nvmlEventSetCreate"); !s.ok()) {
    return s;
  }
  return NvmlEventSet{reinterpret_cast<uintptr_t>(set)};
}

absl::Status NvmlLoader::EventSetFree(NvmlEventSet set) {
  return sym_->Check(sym_->event_set_free(ToSet(set)), "nvmlEventSetFree");
}

absl::Status NvmlLoader::RegisterXidEvents(NvmlEventSet set, NvmlDevice device) {
  return sym_->Check(
      sym_->register_events(ToDevice(device), nvmlEventTypeXidCriticalError, ToSet(set)),
      "nvmlDeviceRegisterEvents(XidCriticalError)");
}

absl::StatusOr<std::vector<XidEvent>> NvmlLoader::PollXidEvents(NvmlEventSet set) {
  std::vector<XidEvent> events;
  for (int i = 0; i < kMaxEventsPerPoll; ++i) {
    nvmlEventData_t data = {};
    const nvmlReturn_t r = sym_->event_set_wait(ToSet(set), &data, /*timeoutms=*/0);
    if (r == NVML_ERROR_TIMEOUT) break;  // nothing (more) pending
    if (absl::Status s = sym_->Check(r, "nvmlEventSetWait_v2"); !s.ok()) {
      if (!events.empty()) break;  // deliver what arrived; the next poll reports the error
      return s;
    }
    if ((data.eventType & nvmlEventTypeXidCriticalError) == 0) continue;
    unsigned int index = 0;
    if (absl::Status s = sym_->Check(sym_->device_index(data.device, &index), "nvmlDeviceGetIndex");
        !s.ok()) {
      return s;
    }
    events.push_back(XidEvent{static_cast<int>(index), static_cast<uint64_t>(data.eventData)});
  }
  return events;
}

}  // namespace phalanx::agent
