// FakeNccl: an in-memory NcclApi for tests. Communicators created with the same unique id
// "connect" once all `nranks` ranks have called CommInitRank: until then CommGetAsyncError says
// kInProgress, after it kReady. A shrink's child connects once every surviving rank of the
// parent shrank with the same exclude list. Nothing runs on a GPU.
//
// Test controls: inits that never complete (deadline tests), an injected asynchronous error on
// one communicator, whether revoke and shrink exist, and counters of every management call.
// A revoked communicator reports kInProgress once, then kReady (quiescent).
//
// Thread-safe.
#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>

#include "absl/synchronization/mutex.h"
#include "runtime/clique/nccl_api.h"

namespace phalanx::clique {

class FakeNccl final : public NcclApi {
 public:
  struct Options {
    int version = 22809;
    bool supports_revoke = true;
    bool supports_shrink = true;
  };
  struct Counts {
    int inits = 0;
    int aborts = 0;
    int destroys = 0;
    int revokes = 0;
    int shrinks = 0;
  };
  struct CommInfo {
    int rank = 0;
    int nranks = 0;
    int cuda_device = kCurrentCudaDevice;
    bool freed = false;  // aborted or destroyed
    bool revoked = false;
    bool shrunk_child = false;  // created by CommShrink
  };

  FakeNccl() : FakeNccl(Options{}) {}
  explicit FakeNccl(Options options) : options_(options) {}

  absl::StatusOr<int> GetVersion() override { return options_.version; }
  absl::StatusOr<NcclUniqueId> GetUniqueId() override;
  absl::StatusOr<CommHandle> CommInitRank(int nranks, const NcclUniqueId& id, int rank,
                                          int cuda_device) override;
  absl::StatusOr<CommProgress> CommGetAsyncError(CommHandle comm) override;
  absl::Status CommAbort(CommHandle comm) override;
  absl::Status CommDestroy(CommHandle comm) override;
  bool SupportsRevoke() const override { return options_.supports_revoke; }
  absl::Status CommRevoke(CommHandle comm) override;
  bool SupportsShrink() const override { return options_.supports_shrink; }
  absl::StatusOr<CommHandle> CommShrink(CommHandle comm, absl::Span<const int> exclude_ranks,
                                        bool abort_in_flight) override;

  // Communicators created from now on (init or shrink) stay kInProgress forever.
  void SetInitsNeverComplete(bool never);
  // From now on CommGetAsyncError(comm) returns `error` (e.g. Unavailable "remote error").
  void InjectAsyncError(CommHandle comm, absl::Status error);

  Counts counts() const;
  // nullopt for a handle this fake never returned.
  std::optional<CommInfo> Info(CommHandle comm) const;
  // Communicators neither aborted nor destroyed.
  int live_comms() const;

 private:
  struct Group {
    int nranks = 0;
    std::set<int> joined;
  };
  struct Comm {
    CommInfo info;
    std::string group;
    bool never_completes = false;
    bool revoke_pending = false;
    absl::Status error;
  };

  absl::StatusOr<Comm*> LiveCommLocked(CommHandle handle) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<CommHandle> JoinLocked(const std::string& group, int nranks, int rank,
                                        CommInfo info) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Options options_;
  mutable absl::Mutex mu_;
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  uintptr_t next_handle_ ABSL_GUARDED_BY(mu_) = 1;
  bool never_complete_ ABSL_GUARDED_BY(mu_) = false;
  std::map<std::string, Group> groups_ ABSL_GUARDED_BY(mu_);
  std::map<uintptr_t, Comm> comms_ ABSL_GUARDED_BY(mu_);
  Counts counts_ ABSL_GUARDED_BY(mu_);
};

}  // namespace phalanx::clique
