// Participants: who takes part in a barrier: every task of the job, or a sorted list of ids.
// "Every task" is kept as the job's size, never as a list: with 16,384 tasks, building the list
// of all ids and comparing it with the pending barrier's at each arrival made one barrier round
// cost O(tasks²) (264 ms at 16,384 tasks, issue 33), while it is O(1) this way.
// A value type; not thread-safe (the service holds its lock).
#pragma once

#include <algorithm>
#include <cstddef>
#include <utility>
#include <vector>

namespace phalanx::coord {

class Participants {
 public:
  // Tasks 0 .. num_tasks-1.
  static Participants All(int num_tasks) {
    Participants p;
    p.all_ = num_tasks;
    return p;
  }
  // `ids` sorted and unique, not every task (TaskTable::ResolveSubset checks and makes that
  // All, so the two spellings of "every task" compare equal).
  static Participants Listed(std::vector<int> ids) {
    Participants p;
    p.ids_ = std::move(ids);
    return p;
  }

  bool all() const { return all_ >= 0; }
  size_t size() const { return all() ? static_cast<size_t>(all_) : ids_.size(); }
  bool Contains(int task) const {
    return all() ? task >= 0 && task < all_ : std::binary_search(ids_.begin(), ids_.end(), task);
  }
  // Calls `f(id)` for each participant in increasing order (O(size): for rare paths only, such
  // as naming the tasks a timed-out barrier missed).
  template <typename F>
  void ForEach(F&& f) const {
    if (!all()) {
      for (int id : ids_) f(id);
      return;
    }
    for (int id = 0; id < all_; ++id) f(id);
  }
  // The listed ids (empty when all()).
  const std::vector<int>& listed() const { return ids_; }

  bool operator==(const Participants& other) const = default;

 private:
  int all_ = -1;  // >= 0: every task of a job of this size
  std::vector<int> ids_;
};

}  // namespace phalanx::coord
