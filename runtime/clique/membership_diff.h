// What a membership change means for one clique, as a pure diff of its key's members against
// the job's current members: who left, who is down, who restarted (and with which incarnation),
// and whether this task itself is among them. CliqueManager decides what to do with it
// (re-form, shrink, wait, fail). No I/O, no state; thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/base/incarnation.h"
#include "runtime/clique/clique_key.h"

namespace phalanx::clique {

// One task as the latest membership knows it.
struct MemberStatus {
  int task_id = 0;
  base::Incarnation incarnation = 0;
  bool alive = true;  // false: failed, its next incarnation has not registered yet
};

struct MembershipDiff {
  // The key's members still in the job, each with its current incarnation.
  std::vector<CliqueMember> survivors;
  std::vector<int> excluded_ranks;   // the ranks of members that left
  std::vector<std::string> changes;  // "task 3 left", "task 1 is down", "task 2 restarted (...)"
  bool restarted = false;            // a member has a new incarnation
  bool down = false;                 // a member is not alive
  bool self_changed = false;         // `self_task` left, is down or restarted

  bool unchanged() const { return changes.empty(); }
};

// `members`: task id → its status; a task missing from it left the job.
MembershipDiff DiffMembership(const CliqueKey& key, int self_task,
                              const std::map<int, MemberStatus>& members);

}  // namespace phalanx::clique
