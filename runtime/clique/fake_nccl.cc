#include "runtime/clique/fake_nccl.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace phalanx::clique {

absl::StatusOr<NcclUniqueId> FakeNccl::GetUniqueId() {
  absl::MutexLock lock(&mu_);
  std::string text = absl::StrCat("fake-nccl-id-", next_id_++);
  NcclUniqueId id;
  std::copy(text.begin(), text.end(), id.bytes.begin());
  return id;
}

absl::StatusOr<CommHandle> FakeNccl::JoinLocked(const std::string& group, int nranks, int rank,
                                                CommInfo info) {
  if (nranks < 1 || rank < 0 || rank >= nranks) {
    return absl::InvalidArgumentError(absl::StrCat("rank ", rank, " of ", nranks));
  }
  Group& g = groups_[group];
  if (g.nranks == 0) g.nranks = nranks;
  if (g.nranks != nranks) {
    return absl::InvalidArgumentError(
        absl::StrCat("nranks ", nranks, " but the group was started with ", g.nranks));
  }
  if (!g.joined.insert(rank).second) {
    return absl::InvalidArgumentError(absl::StrCat("rank ", rank, " joined twice"));
  }
  info.rank = rank;
  info.nranks = nranks;
  CommHandle handle{next_handle_++};
  Comm& comm = comms_[handle.value];
  comm.info = info;
  comm.group = group;
  comm.never_completes = never_complete_;
  return handle;
}

absl::StatusOr<CommHandle> FakeNccl::CommInitRank(int nranks, const NcclUniqueId& id, int rank,
                                                  int cuda_device) {
  absl::MutexLock lock(&mu_);
  ++counts_.inits;
  CommInfo info;
  info.cuda_device = cuda_device;
  return JoinLocked(id.ToBytes(), nranks, rank, info);
}

absl::StatusOr<FakeNccl::Comm*> FakeNccl::LiveCommLocked(CommHandle handle) {
  auto it = comms_.find(handle.value);
  if (it == comms_.end() || it->second.info.freed) {
    return absl::InvalidArgumentError(absl::StrCat("no live communicator ", handle.value));
  }
  return &it->second;
}

absl::StatusOr<CommProgress> FakeNccl::CommGetAsyncError(CommHandle handle) {
  absl::MutexLock lock(&mu_);
  absl::StatusOr<Comm*> comm = LiveCommLocked(handle);
  if (!comm.ok()) return comm.status();
  Comm& c = **comm;
  if (!c.error.ok()) return c.error;
  if (c.info.revoked) {
    if (!c.revoke_pending) return CommProgress::kReady;
    c.revoke_pending = false;
    return CommProgress::kInProgress;
  }
  const Group& g = groups_.at(c.group);
  bool connected = static_cast<int>(g.joined.size()) == g.nranks;
  return connected && !c.never_completes ? CommProgress::kReady : CommProgress::kInProgress;
}

absl::Status FakeNccl::CommAbort(CommHandle handle) {
  absl::MutexLock lock(&mu_);
  absl::StatusOr<Comm*> comm = LiveCommLocked(handle);
  if (!comm.ok()) return comm.status();
  (*comm)->info.freed = true;
  ++counts_.aborts;
  return absl::OkStatus();
}

absl::Status FakeNccl::CommDestroy(CommHandle handle) {
  absl::MutexLock lock(&mu_);
  absl::StatusOr<Comm*> comm = LiveCommLocked(handle);
  if (!comm.ok()) return comm.status();
  (*comm)->info.freed = true;
  ++counts_.destroys;
  return absl::OkStatus();
}

absl::Status FakeNccl::CommRevoke(CommHandle handle) {
  if (!options_.supports_revoke) return absl::UnimplementedError("ncclCommRevoke: unsupported");
  absl::MutexLock lock(&mu_);
  absl::StatusOr<Comm*> comm = LiveCommLocked(handle);
  if (!comm.ok()) return comm.status();
  (*comm)->info.revoked = true;
  (*comm)->revoke_pending = true;
  ++counts_.revokes;
  return absl::OkStatus();
}

absl::StatusOr<CommHandle> FakeNccl::CommShrink(CommHandle handle,
                                                absl::Span<const int> exclude_ranks,
                                                bool abort_in_flight) {
  if (!options_.supports_shrink) return absl::UnimplementedError("ncclCommShrink: unsupported");
  absl::MutexLock lock(&mu_);
  absl::StatusOr<Comm*> comm = LiveCommLocked(handle);
  if (!comm.ok()) return comm.status();
  Comm& parent = **comm;
  if (!parent.error.ok() && !abort_in_flight && !parent.info.revoked) {
    return absl::FailedPreconditionError("shrinking a failed communicator needs abort_in_flight");
  }
  std::vector<int> excluded(exclude_ranks.begin(), exclude_ranks.end());
  std::sort(excluded.begin(), excluded.end());
  excluded.erase(std::unique(excluded.begin(), excluded.end()), excluded.end());
  for (int r : excluded) {
    if (r < 0 || r >= parent.info.nranks || r == parent.info.rank) {
      return absl::InvalidArgumentError(absl::StrCat("cannot exclude rank ", r));
    }
  }
  ++counts_.shrinks;
  int new_rank =
      parent.info.rank -
      static_cast<int>(std::lower_bound(excluded.begin(), excluded.end(), parent.info.rank) -
                       excluded.begin());
  CommInfo info;
  info.cuda_device = parent.info.cuda_device;
  info.shrunk_child = true;
  return JoinLocked(absl::StrCat(parent.group, "/shrink-", absl::StrJoin(excluded, ",")),
                    parent.info.nranks - static_cast<int>(excluded.size()), new_rank, info);
}

void FakeNccl::SetInitsNeverComplete(bool never) {
  absl::MutexLock lock(&mu_);
  never_complete_ = never;
}

void FakeNccl::InjectAsyncError(CommHandle handle, absl::Status error) {
  absl::MutexLock lock(&mu_);
  auto it = comms_.find(handle.value);
  if (it != comms_.end()) it->second.error = std::move(error);
}

FakeNccl::Counts FakeNccl::counts() const {
  absl::MutexLock lock(&mu_);
  return counts_;
}

std::optional<FakeNccl::CommInfo> FakeNccl::Info(CommHandle handle) const {
  absl::MutexLock lock(&mu_);
  auto it = comms_.find(handle.value);
  if (it == comms_.end()) return std::nullopt;
  return it->second.info;
}

int FakeNccl::live_comms() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(std::count_if(comms_.begin(), comms_.end(),
                                        [](const auto& e) { return !e.second.info.freed; }));
}

}  // namespace phalanx::clique
