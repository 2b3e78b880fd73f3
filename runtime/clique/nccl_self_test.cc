#include "runtime/clique/nccl_self_test.h"

#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <vector>

#include "absl/strings/str_cat.h"
#include "runtime/clique/nccl_loader.h"

namespace phalanx::clique {
namespace {

// The few C entry points, declared by hand (stable ABI since NCCL 2.0 / CUDA 10): no headers.
constexpr int kNcclFloat32 = 7;
constexpr int kNcclSum = 0;
constexpr int kCudaMemcpyHostToDevice = 1;
constexpr int kCudaMemcpyDeviceToHost = 2;

struct Libs {
  int (*cuda_get_device_count)(int*) = nullptr;
  int (*cuda_set_device)(int) = nullptr;
  int (*cuda_malloc)(void**, size_t) = nullptr;
  int (*cuda_free)(void*) = nullptr;
  int (*cuda_memcpy)(void*, const void*, size_t, int) = nullptr;
  int (*cuda_stream_create)(void**) = nullptr;
  int (*cuda_stream_synchronize)(void*) = nullptr;
  int (*cuda_stream_destroy)(void*) = nullptr;
  const char* (*cuda_error_string)(int) = nullptr;
  int (*nccl_comm_init_all)(void**, int, const int*) = nullptr;
  int (*nccl_all_reduce)(const void*, void*, size_t, int, int, void*, void*) = nullptr;
  int (*nccl_group_start)() = nullptr;
  int (*nccl_group_end)() = nullptr;
  int (*nccl_comm_destroy)(void*) = nullptr;
  const char* (*nccl_error_string)(int) = nullptr;

  absl::Status Cuda(int err, absl::string_view what) const {
    if (err == 0) return absl::OkStatus();
    return absl::InternalError(absl::StrCat(what, ": CUDA error ", err, " (",
                                            cuda_error_string ? cuda_error_string(err) : "?", ")"));
  }
  absl::Status Nccl(int err, absl::string_view what) const {
    if (err == 0) return absl::OkStatus();
    return absl::InternalError(absl::StrCat(what, ": NCCL error ", err, " (",
                                            nccl_error_string ? nccl_error_string(err) : "?", ")"));
  }
};

void* OpenAny(const std::vector<std::string>& paths) {
  for (const std::string& p : paths) {
    if (void* h = dlopen(p.c_str(), RTLD_NOW | RTLD_LOCAL); h != nullptr) return h;
  }
  return nullptr;
}

template <typename Fn>
bool Bind(void* lib, Fn& fn, const char* name) {
  fn = reinterpret_cast<Fn>(dlsym(lib, name));
  return fn != nullptr;
}

absl::StatusOr<Libs> Load() {
  void* cudart = OpenAny(NcclLoader::DefaultCudartPaths());
  if (cudart == nullptr) return absl::UnavailableError("no GPU: libcudart cannot be loaded");
  void* nccl = OpenAny(NcclLoader::DefaultNcclPaths());
  if (nccl == nullptr) return absl::UnavailableError("no NCCL: libnccl cannot be loaded");
  Libs l;
  const bool ok = Bind(cudart, l.cuda_get_device_count, "cudaGetDeviceCount") &&
                  Bind(cudart, l.cuda_set_device, "cudaSetDevice") &&
                  Bind(cudart, l.cuda_malloc, "cudaMalloc") &&
                  Bind(cudart, l.cuda_free, "cudaFree") &&
                  Bind(cudart, l.cuda_memcpy, "cudaMemcpy") &&
                  Bind(cudart, l.cuda_stream_create, "cudaStreamCreate") &&
                  Bind(cudart, l.cuda_stream_synchronize, "cudaStreamSynchronize") &&
                  Bind(cudart, l.cuda_stream_destroy, "cudaStreamDestroy") &&
                  Bind(cudart, l.cuda_error_string, "cudaGetErrorString") &&
                  Bind(nccl, l.nccl_comm_init_all, "ncclCommInitAll") &&
                  Bind(nccl, l.nccl_all_reduce, "ncclAllReduce") &&
                  Bind(nccl, l.nccl_group_start, "ncclGroupStart") &&
                  Bind(nccl, l.nccl_group_end, "ncclGroupEnd") &&
                  Bind(nccl, l.nccl_comm_destroy, "ncclCommDestroy") &&
                  Bind(nccl, l.nccl_error_string, "ncclGetErrorString");
  if (!ok) return absl::UnavailableError("libcudart or libnccl lacks an expected symbol");
  return l;
}

double MsSince(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace

absl::StatusOr<AllReduceCheck> RunLocalAllReduce(size_t bytes, int iterations) {
  absl::StatusOr<Libs> libs = Load();
  if (!libs.ok()) return libs.status();
  const Libs& l = *libs;
  int n = 0;
  if (int err = l.cuda_get_device_count(&n); err != 0 || n == 0) {
    return absl::UnavailableError(
        err != 0 ? absl::StrCat("no GPU: cudaGetDeviceCount: ", l.cuda_error_string(err))
                 : std::string("no GPU: cudaGetDeviceCount found 0 devices"));
  }
  const size_t count = std::max<size_t>(1, bytes / sizeof(float));
  AllReduceCheck check;
  check.devices = n;
  std::vector<void*> comms(static_cast<size_t>(n), nullptr);
  std::vector<void*> buffers(static_cast<size_t>(n), nullptr);
  std::vector<void*> streams(static_cast<size_t>(n), nullptr);
  absl::Status status;
  auto cleanup = [&] {
    for (int d = 0; d < n; ++d) {
      l.cuda_set_device(d);
      if (streams[d] != nullptr) l.cuda_stream_destroy(streams[d]);
      if (buffers[d] != nullptr) l.cuda_free(buffers[d]);
      if (comms[d] != nullptr) l.nccl_comm_destroy(comms[d]);
    }
  };
  std::vector<int> devices(static_cast<size_t>(n));
  for (int d = 0; d < n; ++d) devices[static_cast<size_t>(d)] = d;
  auto start = std::chrono::steady_clock::now();
  status = l.Nccl(l.nccl_comm_init_all(comms.data(), n, devices.data()), "ncclCommInitAll");
  check.init_ms = MsSince(start);
  const std::vector<float> ones(count, 1.0f);
  for (int d = 0; d < n && status.ok(); ++d) {
    status = l.Cuda(l.cuda_set_device(d), "cudaSetDevice");
    if (status.ok())
      status = l.Cuda(l.cuda_malloc(&buffers[d], count * sizeof(float)), "cudaMalloc");
    if (status.ok()) status = l.Cuda(l.cuda_stream_create(&streams[d]), "cudaStreamCreate");
    if (status.ok()) {
      status = l.Cuda(
          l.cuda_memcpy(buffers[d], ones.data(), count * sizeof(float), kCudaMemcpyHostToDevice),
          "cudaMemcpy");
    }
  }
  // One warm-up all-reduce (sets every element to n), then the timed ones on the result
  // (in place; the values grow by a factor n each time, so only the warm-up is checked).
  auto all_reduce = [&]() -> absl::Status {
    if (absl::Status s = l.Nccl(l.nccl_group_start(), "ncclGroupStart"); !s.ok()) return s;
    for (int d = 0; d < n; ++d) {
      if (absl::Status s = l.Nccl(l.nccl_all_reduce(buffers[d], buffers[d], count, kNcclFloat32,
                                                    kNcclSum, comms[d], streams[d]),
                                  "ncclAllReduce");
          !s.ok()) {
        l.nccl_group_end();
        return s;
      }
    }
    if (absl::Status s = l.Nccl(l.nccl_group_end(), "ncclGroupEnd"); !s.ok()) return s;
    for (int d = 0; d < n; ++d) {
      l.cuda_set_device(d);
      if (absl::Status s = l.Cuda(l.cuda_stream_synchronize(streams[d]), "cudaStreamSynchronize");
          !s.ok()) {
        return s;
      }
    }
    return absl::OkStatus();
  };
  if (status.ok()) status = all_reduce();
  if (status.ok()) {
    check.correct = true;
    std::vector<float> host(count);
    for (int d = 0; d < n && status.ok(); ++d) {
      l.cuda_set_device(d);
      status = l.Cuda(
          l.cuda_memcpy(host.data(), buffers[d], count * sizeof(float), kCudaMemcpyDeviceToHost),
          "cudaMemcpy");
      for (size_t i = 0; i < count && status.ok(); i += std::max<size_t>(1, count / 64)) {
        if (host[i] != static_cast<float>(n)) check.correct = false;
      }
    }
  }
  if (status.ok() && iterations > 0) {
    start = std::chrono::steady_clock::now();
    for (int i = 0; i < iterations && status.ok(); ++i) status = all_reduce();
    check.allreduce_ms = MsSince(start) / iterations;
    const double seconds = check.allreduce_ms / 1000.0;
    check.busbw_gbps =
        seconds > 0 ? 2.0 * (n - 1) / n * static_cast<double>(count * sizeof(float)) / seconds / 1e9
                    : 0;
  }
  cleanup();
  if (!status.ok()) return status;
  return check;
}

}  // namespace phalanx::clique
