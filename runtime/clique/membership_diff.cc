#include "runtime/clique/membership_diff.h"

#include "absl/strings/str_cat.h"

namespace phalanx::clique {

MembershipDiff DiffMembership(const CliqueKey& key, int self_task,
                              const std::map<int, MemberStatus>& members) {
  MembershipDiff diff;
  for (const CliqueMember& m : key.members()) {
    auto it = members.find(m.task_id);
    if (it == members.end()) {
      std::vector<int> ranks = key.RanksOf(m.task_id);
      diff.excluded_ranks.insert(diff.excluded_ranks.end(), ranks.begin(), ranks.end());
      diff.changes.push_back(absl::StrCat("task ", m.task_id, " left"));
      diff.self_changed |= m.task_id == self_task;
      continue;
    }
    CliqueMember next = m;
    if (!it->second.alive) {
      diff.down = true;
      diff.changes.push_back(absl::StrCat("task ", m.task_id, " is down"));
      diff.self_changed |= m.task_id == self_task;
    } else if (it->second.incarnation != m.incarnation) {
      diff.restarted = true;
      next.incarnation = it->second.incarnation;
      diff.changes.push_back(absl::StrCat("task ", m.task_id, " restarted (incarnation ",
                                          m.incarnation, " -> ", next.incarnation, ")"));
      diff.self_changed |= m.task_id == self_task;
    }
    diff.survivors.push_back(std::move(next));
  }
  return diff;
}

}  // namespace phalanx::clique
