// NcclApi: the seam between the clique manager and NCCL. Holds exactly the calls the manager
// needs, with opaque handles and absl::Status results, so nothing above it includes nccl.h or
// links libnccl. Implementations: NcclLoader (nccl_loader.h, dlopen of libnccl at run time) and
// FakeNccl (fake_nccl.h, in memory, for tests).
//
// Every communicator is created non-blocking (NCCL config `blocking = 0`): init, shrink and
// revoke return at once and their progress is read with CommGetAsyncError, which is what lets
// the manager enforce deadlines without a thread per communicator.
//
// Thread-safety: implementations are thread-safe, but NCCL forbids concurrent management calls
// on one communicator; callers serialise calls per communicator (CliqueManager does).
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace phalanx::clique {

inline constexpr int kNcclUniqueIdBytes = 128;

// ncclUniqueId: 128 opaque bytes that rank 0 creates and every other rank needs to join.
struct NcclUniqueId {
  std::array<char, kNcclUniqueIdBytes> bytes{};

  std::string ToBytes() const { return std::string(bytes.data(), bytes.size()); }
  // InvalidArgument unless `data` is exactly kNcclUniqueIdBytes long.
  static absl::StatusOr<NcclUniqueId> FromBytes(absl::string_view data);
  friend bool operator==(const NcclUniqueId&, const NcclUniqueId&) = default;
};

// An opaque communicator: ncclComm_t for NcclLoader, an id for FakeNccl. 0 is "none".
struct CommHandle {
  uintptr_t value = 0;

  bool valid() const { return value != 0; }
  friend bool operator==(const CommHandle&, const CommHandle&) = default;
};

// What CommGetAsyncError says when it says "no error".
enum class CommProgress {
  kReady,       // ncclSuccess: initialised (or quiescent after a revoke)
  kInProgress,  // ncclInProgress: a non-blocking init, shrink or revoke is still running
};

// Uses a CUDA device already current on the calling thread.
inline constexpr int kCurrentCudaDevice = -1;

class NcclApi {
 public:
  virtual ~NcclApi() = default;

  // NCCL's version code (22809 for 2.28.9).
  virtual absl::StatusOr<int> GetVersion() = 0;
  // A fresh unique id (rank 0 calls this once per communicator). Errors: Internal, Unavailable.
  virtual absl::StatusOr<NcclUniqueId> GetUniqueId() = 0;
  // Starts a non-blocking ncclCommInitRankConfig on `cuda_device` (kCurrentCudaDevice: the
  // thread's current one) and returns the handle at once; CommGetAsyncError reports progress.
  // Errors: InvalidArgument (bad rank/nranks), Internal (NCCL or CUDA failure).
  virtual absl::StatusOr<CommHandle> CommInitRank(int nranks, const NcclUniqueId& id, int rank,
                                                  int cuda_device) = 0;
  // kReady or kInProgress; any asynchronous NCCL error is returned as a non-OK status
  // (Unavailable for ncclRemoteError, i.e. a peer failed; Internal otherwise).
  virtual absl::StatusOr<CommProgress> CommGetAsyncError(CommHandle comm) = 0;
  // ncclCommAbort: stops in-flight work and frees the communicator; `comm` is invalid after.
  virtual absl::Status CommAbort(CommHandle comm) = 0;
  // ncclCommDestroy: frees a communicator with no work in flight (ready, or revoked and
  // quiescent); `comm` is invalid after.
  virtual absl::Status CommDestroy(CommHandle comm) = 0;

  // True when the library has ncclCommRevoke (NCCL >= 2.28).
  virtual bool SupportsRevoke() const = 0;
  // ncclCommRevoke: stops in-flight operations; CommGetAsyncError says kInProgress until the
  // communicator is quiescent, then kReady (after which destroy or shrink is safe).
  // Unimplemented when !SupportsRevoke().
  virtual absl::Status CommRevoke(CommHandle comm) = 0;

  // True when the library has ncclCommShrink (NCCL >= 2.27).
  virtual bool SupportsShrink() const = 0;
  // ncclCommShrink: starts a non-blocking child communicator without `exclude_ranks`; ranks
  // are renumbered in order to fill the gaps. `abort_in_flight` (NCCL_SHRINK_ABORT) first
  // terminates the parent's in-flight operations, for a parent that was not revoked. The parent
  // stays valid and must still be destroyed or aborted. Unimplemented when !SupportsShrink().
  virtual absl::StatusOr<CommHandle> CommShrink(CommHandle comm,
                                                absl::Span<const int> exclude_ranks,
                                                bool abort_in_flight) = 0;
};

}  // namespace phalanx::clique
