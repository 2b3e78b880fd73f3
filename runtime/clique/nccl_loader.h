// NcclLoader: the real NcclApi. Loads libnccl (libnccl.so.2, then libnccl.so) with dlopen at
// run time, so no binary links NCCL and a process without it still starts: Create fails with
// a message saying what was tried. ncclCommRevoke and ncclCommShrink are optional (NCCL 2.28
// and 2.27); without them Supports*() is false and those calls return Unimplemented. libcudart
// is loaded too, optionally, to select a CUDA device per init.
//
// Types and signatures come from nccl.h when CMake found it (PHALANX_HAVE_NCCL_H); a build
// without it compiles a loader whose Create returns Unavailable.
//
// The library stays loaded for the life of the process (NCCL's threads may outlive a
// communicator). Thread-safe: immutable after Create.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "runtime/clique/nccl_api.h"

namespace phalanx::clique {

class NcclLoader final : public NcclApi {
 public:
  struct Options {
    // Tried in order; bare names go through the dynamic loader's search path.
    std::vector<std::string> nccl_paths = DefaultNcclPaths();
    std::vector<std::string> cudart_paths = DefaultCudartPaths();
  };
  static std::vector<std::string> DefaultNcclPaths();
  static std::vector<std::string> DefaultCudartPaths();
  // Whether this build saw nccl.h (otherwise Create always returns Unavailable).
  static bool BuiltWithNcclHeader();

  // NotFound: no candidate library could be loaded (the message lists each path and its
  // dlerror). FailedPrecondition: the library lacks a required symbol (NCCL older than 2.14).
  // Unavailable: built without nccl.h.
  static absl::StatusOr<std::unique_ptr<NcclLoader>> Create(Options options);
  static absl::StatusOr<std::unique_ptr<NcclLoader>> Create() { return Create(Options()); }
  ~NcclLoader() override;

  // The library that was loaded, and whether libcudart was.
  const std::string& nccl_path() const { return nccl_path_; }
  bool has_cudart() const;

  absl::StatusOr<int> GetVersion() override;
  absl::StatusOr<NcclUniqueId> GetUniqueId() override;
  // FailedPrecondition when `cuda_device` is set but libcudart could not be loaded.
  absl::StatusOr<CommHandle> CommInitRank(int nranks, const NcclUniqueId& id, int rank,
                                          int cuda_device) override;
  absl::StatusOr<CommProgress> CommGetAsyncError(CommHandle comm) override;
  absl::Status CommAbort(CommHandle comm) override;
  absl::Status CommDestroy(CommHandle comm) override;
  bool SupportsRevoke() const override;
  absl::Status CommRevoke(CommHandle comm) override;
  bool SupportsShrink() const override;
  absl::StatusOr<CommHandle> CommShrink(CommHandle comm, absl::Span<const int> exclude_ranks,
                                        bool abort_in_flight) override;

 private:
  struct Symbols;  // function pointers resolved with dlsym
  NcclLoader(std::string nccl_path, std::unique_ptr<Symbols> symbols);

  const std::string nccl_path_;
  const std::unique_ptr<const Symbols> sym_;
};

}  // namespace phalanx::clique
