#include "operator/controller/move_budget.h"

#include <algorithm>

namespace phalanx::op {

void ForgetOldMoves(TaskStatus& task, absl::Time now) {
  std::vector<absl::Time>& moves = task.recent_moves;
  std::sort(moves.begin(), moves.end());
  moves.erase(moves.begin(), std::find_if(moves.begin(), moves.end(),
                                          [now](absl::Time t) { return t > now - kMoveWindow; }));
}

std::optional<absl::Time> MoveHeldUntil(const TaskStatus& task, absl::Time now) {
  std::vector<absl::Time> moves = task.recent_moves;
  std::sort(moves.begin(), moves.end());
  auto first_in_window = std::find_if(moves.begin(), moves.end(),
                                      [now](absl::Time t) { return t > now - kMoveWindow; });
  const auto in_window = static_cast<int>(moves.end() - first_in_window);
  if (in_window < kMaxMovesPerWindow) return std::nullopt;
  // The move that leaves the window first, kMaxMovesPerWindow from the end, frees a slot.
  return *(moves.end() - kMaxMovesPerWindow) + kMoveWindow;
}

void RecordMove(TaskStatus& task, absl::Time now) {
  ForgetOldMoves(task, now);
  task.recent_moves.push_back(now);
  task.move_held_until.reset();
}

}  // namespace phalanx::op
