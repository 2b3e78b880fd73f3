#include "runtime/clique/clique_key.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace phalanx::clique {
namespace {

// FNV-1a, 64 bits: unlike absl::Hash it is the same in every process, which a key shared
// through the KV store needs.
uint64_t Fingerprint(const std::string& s) {
  uint64_t h = 14695981039346656037ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

absl::Status ValidateJob(const std::string& job) {
  if (job.empty()) return absl::InvalidArgumentError("clique key: empty job name");
  for (char c : job) {
    if (c <= ' ' || c > '~' || c == '/') {
      return absl::InvalidArgumentError(absl::StrCat(
          "clique key: job name \"", job, "\" must be printable ASCII without spaces or '/'"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<CliqueKey> CliqueKey::Create(std::string job, std::vector<CliqueMember> members) {
  if (absl::Status s = ValidateJob(job); !s.ok()) return s;
  if (members.empty()) return absl::InvalidArgumentError("clique key: no members");
  std::sort(members.begin(), members.end(),
            [](const CliqueMember& a, const CliqueMember& b) { return a.task_id < b.task_id; });
  int num_ranks = 0;
  for (size_t i = 0; i < members.size(); ++i) {
    CliqueMember& m = members[i];
    if (m.task_id < 0) {
      return absl::InvalidArgumentError(absl::StrCat("clique key: negative task id ", m.task_id));
    }
    if (i > 0 && members[i - 1].task_id == m.task_id) {
      return absl::InvalidArgumentError(absl::StrCat("clique key: task ", m.task_id, " repeated"));
    }
    if (m.device_ids.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("clique key: task ", m.task_id, " has no devices"));
    }
    std::sort(m.device_ids.begin(), m.device_ids.end());
    if (m.device_ids.front() < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("clique key: task ", m.task_id, " has a negative device id"));
    }
    if (std::adjacent_find(m.device_ids.begin(), m.device_ids.end()) != m.device_ids.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("clique key: task ", m.task_id, " lists a device twice"));
    }
    num_ranks += static_cast<int>(m.device_ids.size());
  }
  return CliqueKey(std::move(job), std::move(members), num_ranks);
}

const CliqueMember* CliqueKey::FindMember(int task_id) const {
  auto it = std::lower_bound(members_.begin(), members_.end(), task_id,
                             [](const CliqueMember& m, int id) { return m.task_id < id; });
  return it != members_.end() && it->task_id == task_id ? &*it : nullptr;
}

std::optional<int> CliqueKey::RankOf(int task_id, int device_id) const {
  int rank = 0;
  for (const CliqueMember& m : members_) {
    for (int d : m.device_ids) {
      if (m.task_id == task_id && d == device_id) return rank;
      ++rank;
    }
  }
  return std::nullopt;
}

std::vector<int> CliqueKey::RanksOf(int task_id) const {
  std::vector<int> ranks;
  int rank = 0;
  for (const CliqueMember& m : members_) {
    for (size_t i = 0; i < m.device_ids.size(); ++i, ++rank) {
      if (m.task_id == task_id) ranks.push_back(rank);
    }
  }
  return ranks;
}

std::optional<std::pair<int, int>> CliqueKey::RankOwner(int rank) const {
  if (rank < 0) return std::nullopt;
  for (const CliqueMember& m : members_) {
    if (rank < static_cast<int>(m.device_ids.size())) {
      return std::make_pair(m.task_id, m.device_ids[rank]);
    }
    rank -= static_cast<int>(m.device_ids.size());
  }
  return std::nullopt;
}

std::string CliqueKey::ToString() const {
  std::vector<std::string> parts;
  parts.reserve(members_.size());
  for (const CliqueMember& m : members_) {
    parts.push_back(
        absl::StrCat("t", m.task_id, "#", m.incarnation, ":", absl::StrJoin(m.device_ids, ",")));
  }
  return absl::StrCat(job_, "[", absl::StrJoin(parts, " "), "]");
}

std::string CliqueKey::KvPrefix() const {
  return absl::StrFormat("nccl/%s/%dr-%016x", job_, num_ranks_, Fingerprint(ToString()));
}

}  // namespace phalanx::clique
