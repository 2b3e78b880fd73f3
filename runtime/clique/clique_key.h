// CliqueKey: names one NCCL communicator of a job: the job plus its members, each a task with
// its incarnation and the logical device ids (device_map.h) it contributes. Two keys are equal
// exactly when they describe the same communicator, so a member restarting (new incarnation)
// gives a new key, and with it a new unique-id exchange.
//
// Ranks: members are sorted by task id and each member's devices ascending; rank r is the r-th
// (task, device) pair in that order. NCCL's ncclCommShrink renumbers survivors in the same order,
// so a shrunk communicator's ranks match the key without the removed members.
//
// Immutable value type; thread-compatible.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/base/incarnation.h"

namespace phalanx::clique {

struct CliqueMember {
  int task_id = 0;
  base::Incarnation incarnation = 0;
  std::vector<int> device_ids;  // logical ids, one rank each

  friend bool operator==(const CliqueMember&, const CliqueMember&) = default;
};

class CliqueKey {
 public:
  // Sorts members and devices. InvalidArgument for: a job name that is empty or not a valid
  // KV key segment (printable ASCII, no space or '/'), no members, a repeated task id, a member
  // without devices, a device repeated within a member, a negative task or device id.
  static absl::StatusOr<CliqueKey> Create(std::string job, std::vector<CliqueMember> members);
  // An empty key (no job, no members), a placeholder only.
  CliqueKey() = default;

  const std::string& job() const { return job_; }
  const std::vector<CliqueMember>& members() const { return members_; }
  int num_ranks() const { return num_ranks_; }

  // The member for `task_id`, or nullptr.
  const CliqueMember* FindMember(int task_id) const;
  // The rank of (task_id, device_id), if that pair is in the clique.
  std::optional<int> RankOf(int task_id, int device_id) const;
  // The ranks `task_id` holds (empty when it is not a member).
  std::vector<int> RanksOf(int task_id) const;
  // The (task id, device id) holding `rank`; nullopt when out of range.
  std::optional<std::pair<int, int>> RankOwner(int rank) const;

  // Readable, canonical form for logs: "job[t0#3:0,1 t1#2:0]" (task#incarnation:devices).
  std::string ToString() const;
  // A KV key prefix naming this clique, bounded in length however many members it has:
  // "nccl/<job>/<ranks>r-<16 hex digits of a stable fingerprint of ToString()>".
  std::string KvPrefix() const;

  friend bool operator==(const CliqueKey&, const CliqueKey&) = default;

 private:
  CliqueKey(std::string job, std::vector<CliqueMember> members, int num_ranks)
      : job_(std::move(job)), members_(std::move(members)), num_ranks_(num_ranks) {}

  std::string job_;
  std::vector<CliqueMember> members_;
  int num_ranks_ = 0;
};

}  // namespace phalanx::clique
