#include "runtime/clique/nccl_loader.h"

#include <dlfcn.h>

#include <cstring>
#include <type_traits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

#ifdef PHALANX_HAVE_NCCL_H
#include <nccl.h>
#endif

namespace phalanx::clique {
namespace {

std::vector<std::string> WithLibDir(std::vector<std::string> names) {
#ifdef PHALANX_CUDA_LIB_DIR
  // The toolkit seen at configure time, for hosts where it is not on the loader's path.
  const size_t n = names.size();
  for (size_t i = 0; i < n; ++i) names.push_back(absl::StrCat(PHALANX_CUDA_LIB_DIR, "/", names[i]));
#endif
  return names;
}

// dlopen's first success, or NotFound listing every attempt.
absl::StatusOr<std::pair<void*, std::string>> OpenFirst(const std::vector<std::string>& paths,
                                                        absl::string_view what) {
  std::vector<std::string> tried;
  for (const std::string& path : paths) {
    void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle != nullptr) return std::make_pair(handle, path);
    const char* err = dlerror();
    tried.push_back(absl::StrCat(path, " (", err != nullptr ? err : "unknown error", ")"));
  }
  return absl::NotFoundError(
      absl::StrCat("cannot load ", what, "; tried: ", absl::StrJoin(tried, "; ")));
}

}  // namespace

std::vector<std::string> NcclLoader::DefaultNcclPaths() {
  return WithLibDir({"libnccl.so.2", "libnccl.so"});
}

std::vector<std::string> NcclLoader::DefaultCudartPaths() {
  return WithLibDir({"libcudart.so", "libcudart.so.13", "libcudart.so.12"});
}

#ifdef PHALANX_HAVE_NCCL_H

namespace {
// Optional entry points, declared here so that an older nccl.h still compiles.
using CommRevokeFn = ncclResult_t (*)(ncclComm_t, int);
using CommShrinkFn = ncclResult_t (*)(ncclComm_t, int*, int, ncclComm_t*, ncclConfig_t*, int);
using GetLastErrorFn = const char* (*)(ncclComm_t);
// libcudart: cudaError_t is an int-sized enum, 0 = cudaSuccess.
using CudaSetDeviceFn = int (*)(int);
using CudaGetDeviceFn = int (*)(int*);
using CudaGetErrorStringFn = const char* (*)(int);
constexpr int kNcclShrinkDefault = 0x00;
constexpr int kNcclShrinkAbort = 0x01;
constexpr int kNcclRevokeDefault = 0x00;

ncclComm_t ToComm(CommHandle h) { return reinterpret_cast<ncclComm_t>(h.value); }
CommHandle FromComm(ncclComm_t c) { return CommHandle{reinterpret_cast<uintptr_t>(c)}; }

ncclConfig_t NonBlockingConfig() {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  return config;
}
}  // namespace

struct NcclLoader::Symbols {
  decltype(&ncclGetVersion) get_version = nullptr;
  decltype(&ncclGetUniqueId) get_unique_id = nullptr;
  decltype(&ncclCommInitRankConfig) comm_init_rank_config = nullptr;
  decltype(&ncclCommGetAsyncError) comm_get_async_error = nullptr;
  decltype(&ncclCommAbort) comm_abort = nullptr;
  decltype(&ncclCommDestroy) comm_destroy = nullptr;
  decltype(&ncclGetErrorString) get_error_string = nullptr;
  GetLastErrorFn get_last_error = nullptr;    // optional (2.13)
  CommRevokeFn comm_revoke = nullptr;         // optional (2.28)
  CommShrinkFn comm_shrink = nullptr;         // optional (2.27)
  CudaSetDeviceFn cuda_set_device = nullptr;  // optional: libcudart
  CudaGetDeviceFn cuda_get_device = nullptr;
  CudaGetErrorStringFn cuda_get_error_string = nullptr;

  // OK for ncclSuccess and ncclInProgress; otherwise a status naming `what`.
  absl::Status Check(ncclResult_t r, absl::string_view what, ncclComm_t comm = nullptr) const {
    if (r == ncclSuccess || r == ncclInProgress) return absl::OkStatus();
    std::string message = absl::StrCat(what, ": ", get_error_string(r));
    if (get_last_error != nullptr) {
      const char* last = get_last_error(comm);
      if (last != nullptr && *last != '\0') absl::StrAppend(&message, " (", last, ")");
    }
    switch (r) {
      case ncclInvalidArgument:
        return absl::InvalidArgumentError(message);
      case ncclInvalidUsage:
        return absl::FailedPreconditionError(message);
      case ncclRemoteError:  // a peer failed
      case ncclSystemError:  // network or OS
        return absl::UnavailableError(message);
      default:
        return absl::InternalError(message);
    }
  }
  absl::Status CheckCuda(int err, absl::string_view what) const {
    if (err == 0) return absl::OkStatus();
    return absl::InternalError(absl::StrCat(
        what, ": CUDA error ", err, " (",
        cuda_get_error_string != nullptr ? cuda_get_error_string(err) : "unknown", ")"));
  }
};

bool NcclLoader::BuiltWithNcclHeader() { return true; }

absl::StatusOr<std::unique_ptr<NcclLoader>> NcclLoader::Create(Options options) {
  auto opened = OpenFirst(options.nccl_paths,
                          "NCCL (libnccl.so.2); install NCCL or add its "
                          "directory to LD_LIBRARY_PATH");
  if (!opened.ok()) return opened.status();
  void* lib = opened->first;
  std::string path = opened->second;
  auto sym = std::make_unique<Symbols>();
  std::vector<std::string> missing;
  auto required = [&](auto& fn, const char* name) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, name));
    if (fn == nullptr) missing.push_back(name);
  };
  auto optional = [&](void* from, auto& fn, const char* name) {
    fn = from == nullptr
             ? nullptr
             : reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(from, name));
  };
  required(sym->get_version, "ncclGetVersion");
  required(sym->get_unique_id, "ncclGetUniqueId");
  required(sym->comm_init_rank_config, "ncclCommInitRankConfig");
  required(sym->comm_get_async_error, "ncclCommGetAsyncError");
  required(sym->comm_abort, "ncclCommAbort");
  required(sym->comm_destroy, "ncclCommDestroy");
  required(sym->get_error_string, "ncclGetErrorString");
  if (!missing.empty()) {
    dlclose(lib);
    return absl::FailedPreconditionError(absl::StrCat(path, " lacks ", absl::StrJoin(missing, ", "),
                                                      "; NCCL 2.14 or newer is required"));
  }
  optional(lib, sym->get_last_error, "ncclGetLastError");
  optional(lib, sym->comm_revoke, "ncclCommRevoke");
  optional(lib, sym->comm_shrink, "ncclCommShrink");
  auto cudart = OpenFirst(options.cudart_paths, "libcudart");
  void* cudart_lib = cudart.ok() ? cudart->first : nullptr;
  optional(cudart_lib, sym->cuda_set_device, "cudaSetDevice");
  optional(cudart_lib, sym->cuda_get_device, "cudaGetDevice");
  optional(cudart_lib, sym->cuda_get_error_string, "cudaGetErrorString");
  return std::unique_ptr<NcclLoader>(new NcclLoader(path, std::move(sym)));
}

NcclLoader::NcclLoader(std::string nccl_path, std::unique_ptr<Symbols> symbols)
    : nccl_path_(std::move(nccl_path)), sym_(std::move(symbols)) {}

NcclLoader::~NcclLoader() = default;

bool NcclLoader::has_cudart() const { return sym_->cuda_set_device != nullptr; }

absl::StatusOr<int> NcclLoader::GetVersion() {
  int version = 0;
  if (absl::Status s = sym_->Check(sym_->get_version(&version), "ncclGetVersion"); !s.ok()) {
    return s;
  }
  return version;
}

absl::StatusOr<NcclUniqueId> NcclLoader::GetUniqueId() {
  ncclUniqueId raw;
  if (absl::Status s = sym_->Check(sym_->get_unique_id(&raw), "ncclGetUniqueId"); !s.ok()) {
    return s;
  }
  static_assert(sizeof(raw.internal) == kNcclUniqueIdBytes);
  NcclUniqueId id;
  std::memcpy(id.bytes.data(), raw.internal, kNcclUniqueIdBytes);
  return id;
}

absl::StatusOr<CommHandle> NcclLoader::CommInitRank(int nranks, const NcclUniqueId& id, int rank,
                                                    int cuda_device) {
  if (nranks < 1 || rank < 0 || rank >= nranks) {
    return absl::InvalidArgumentError(absl::StrCat("rank ", rank, " of ", nranks));
  }
  int previous_device = -1;
  if (cuda_device != kCurrentCudaDevice) {
    if (!has_cudart()) {
      return absl::FailedPreconditionError(
          "a CUDA device was requested but libcudart could not be loaded");
    }
    if (absl::Status s = sym_->CheckCuda(sym_->cuda_get_device(&previous_device), "cudaGetDevice");
        !s.ok()) {
      return s;
    }
    if (absl::Status s = sym_->CheckCuda(sym_->cuda_set_device(cuda_device),
                                         absl::StrCat("cudaSetDevice(", cuda_device, ")"));
        !s.ok()) {
      return s;
    }
  }
  ncclUniqueId raw;
  std::memcpy(raw.internal, id.bytes.data(), kNcclUniqueIdBytes);
  ncclConfig_t config = NonBlockingConfig();
  ncclComm_t comm = nullptr;
  absl::Status s = sym_->Check(sym_->comm_init_rank_config(&comm, nranks, raw, rank, &config),
                               "ncclCommInitRankConfig", comm);
  if (previous_device >= 0) sym_->cuda_set_device(previous_device);
  if (!s.ok()) {
    if (comm != nullptr) sym_->comm_abort(comm);
    return s;
  }
  return FromComm(comm);
}

absl::StatusOr<CommProgress> NcclLoader::CommGetAsyncError(CommHandle comm) {
  ncclResult_t async = ncclSuccess;
  if (absl::Status s = sym_->Check(sym_->comm_get_async_error(ToComm(comm), &async),
                                   "ncclCommGetAsyncError", ToComm(comm));
      !s.ok()) {
    return s;
  }
  if (async == ncclInProgress) return CommProgress::kInProgress;
  if (absl::Status s = sym_->Check(async, "asynchronous NCCL error", ToComm(comm)); !s.ok()) {
    return s;
  }
  return CommProgress::kReady;
}

absl::Status NcclLoader::CommAbort(CommHandle comm) {
  return sym_->Check(sym_->comm_abort(ToComm(comm)), "ncclCommAbort");
}

absl::Status NcclLoader::CommDestroy(CommHandle comm) {
  return sym_->Check(sym_->comm_destroy(ToComm(comm)), "ncclCommDestroy");
}

bool NcclLoader::SupportsRevoke() const { return sym_->comm_revoke != nullptr; }

absl::Status NcclLoader::CommRevoke(CommHandle comm) {
  if (!SupportsRevoke()) {
    return absl::UnimplementedError(
        absl::StrCat(nccl_path_, " has no ncclCommRevoke (NCCL < 2.28)"));
  }
  return sym_->Check(sym_->comm_revoke(ToComm(comm), kNcclRevokeDefault), "ncclCommRevoke",
                     ToComm(comm));
}

bool NcclLoader::SupportsShrink() const { return sym_->comm_shrink != nullptr; }

absl::StatusOr<CommHandle> NcclLoader::CommShrink(CommHandle comm,
                                                  absl::Span<const int> exclude_ranks,
                                                  bool abort_in_flight) {
  if (!SupportsShrink()) {
    return absl::UnimplementedError(
        absl::StrCat(nccl_path_, " has no ncclCommShrink (NCCL < 2.27)"));
  }
  std::vector<int> excluded(exclude_ranks.begin(), exclude_ranks.end());
  ncclConfig_t config = NonBlockingConfig();
  ncclComm_t child = nullptr;
  absl::Status s = sym_->Check(
      sym_->comm_shrink(ToComm(comm), excluded.data(), static_cast<int>(excluded.size()), &child,
                        &config, abort_in_flight ? kNcclShrinkAbort : kNcclShrinkDefault),
      "ncclCommShrink", ToComm(comm));
  if (!s.ok()) return s;
  return FromComm(child);
}

#else  // !PHALANX_HAVE_NCCL_H

struct NcclLoader::Symbols {};

namespace {
absl::Status NoHeader() {
  return absl::UnavailableError(
      "NCCL support was not built: nccl.h was not found when configuring (install NCCL's "
      "headers, e.g. the CUDA toolkit with NCCL, and re-run CMake)");
}
}  // namespace

bool NcclLoader::BuiltWithNcclHeader() { return false; }
absl::StatusOr<std::unique_ptr<NcclLoader>> NcclLoader::Create(Options) { return NoHeader(); }
NcclLoader::NcclLoader(std::string nccl_path, std::unique_ptr<Symbols> symbols)
    : nccl_path_(std::move(nccl_path)), sym_(std::move(symbols)) {}
NcclLoader::~NcclLoader() = default;
bool NcclLoader::has_cudart() const { return false; }
absl::StatusOr<int> NcclLoader::GetVersion() { return NoHeader(); }
absl::StatusOr<NcclUniqueId> NcclLoader::GetUniqueId() { return NoHeader(); }
absl::StatusOr<CommHandle> NcclLoader::CommInitRank(int, const NcclUniqueId&, int, int) {
  return NoHeader();
}
absl::StatusOr<CommProgress> NcclLoader::CommGetAsyncError(CommHandle) { return NoHeader(); }
absl::Status NcclLoader::CommAbort(CommHandle) { return NoHeader(); }
absl::Status NcclLoader::CommDestroy(CommHandle) { return NoHeader(); }
bool NcclLoader::SupportsRevoke() const { return false; }
absl::Status NcclLoader::CommRevoke(CommHandle) { return NoHeader(); }
bool NcclLoader::SupportsShrink() const { return false; }
absl::StatusOr<CommHandle> NcclLoader::CommShrink(CommHandle, absl::Span<const int>, bool) {
  return NoHeader();
}

#endif  // PHALANX_HAVE_NCCL_H

}  // namespace phalanx::clique
