// RecoveryOffer: what one task can resume from, as it publishes it during recovery, and the
// rule every task applies to the published offers to agree on one resume step.
//
// The simple rule ("publish your newest checkpoint, resume from the smallest") loses steps when
// the coordinator goes away at the moment a preemption round's sync step is decided: the task
// the round names checkpoints at the sync step and leaves, while a peer waiting in the step
// barrier before it never hears that barrier's release (it went with the coordinator). That peer
// holds the state before the barrier and the one after it, unconfirmed, and only its last
// periodic checkpoint on disk; the smallest newest checkpoint rolls the job back to it. An
// offer carries more: every step the task can resume from (its kept checkpoints and the step
// it holds in memory) and the step it would reach if the barrier it was waiting in had been
// released. A peer holding a step at or past that one proves the release (no task passes a
// step barrier before every task arrived at it), so the pending step counts then.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace phalanx::examples {

struct RecoveryOffer {
  std::set<int64_t> held;          // steps whose state this task has (step 0 always)
  std::optional<int64_t> pending;  // reached if its unanswered step barrier was released
};

// "held=0,10,19 pending=20" (no pending: "held=0,10,19").
std::string FormatOffer(const RecoveryOffer& offer);

// The format above, or a bare step (an offer of that one step: the simple rule's entry).
absl::StatusOr<RecoveryOffer> ParseOffer(absl::string_view text);

// The newest step every offer can resume from: a held step, or a pending step that some offer
// holds a step at or past. Step 0 (the initial state) is common to all, so there is always one.
int64_t AgreeResumeStep(const std::vector<RecoveryOffer>& offers);

}  // namespace phalanx::examples
