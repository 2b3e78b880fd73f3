// The move budget: a task is moved off a preemption (its pod deleted, its next incarnation
// created) at most kMaxMovesPerWindow times in any kMoveWindow. Past that the move waits: the
// task stays Preempting, status.tasks[].moveHeldUntil says until when, a Warning Event
// (MoveLimitReached) says why, and the pass asks to be requeued then. The preemption stage
// (preemption_policy.h) asks before each move and records each move it makes.
//
// Why a bound at all: a node whose preemption taint or DisruptionTarget comes and goes (a taint
// removed by hand and put back, a flapping node controller, a test harness bug) would otherwise
// move the task on every flap, each move a lost step and a fresh pod. The moves are kept in
// status (status.tasks[].recentMoves), so an operator restart keeps the bound. Pure;
// thread-compatible.
#pragma once

#include <optional>

#include "absl/time/time.h"
#include "operator/api/types.h"

namespace phalanx::op {

inline constexpr absl::Duration kMoveWindow = absl::Minutes(1);
inline constexpr int kMaxMovesPerWindow = 3;

// Drops the moves older than the window at `now` from task.recent_moves.
void ForgetOldMoves(TaskStatus& task, absl::Time now);
// std::nullopt when the task may move at `now`; else when it may (the oldest move in the window
// plus the window).
std::optional<absl::Time> MoveHeldUntil(const TaskStatus& task, absl::Time now);
// Records a move at `now` (and clears move_held_until).
void RecordMove(TaskStatus& task, absl::Time now);

}  // namespace phalanx::op
