// Exponential backoff with full jitter, for reconnects and retries of external calls.
// Not thread-safe: one instance per retry loop.
#pragma once

#include <cstdint>

#include "absl/time/time.h"

namespace phalanx::base {

class ExponentialBackoff {
 public:
  // `initial` is the first delay, each failure multiplies by `multiplier` up to `max`.
  // Jitter draws each delay uniformly from [delay/2, delay] (deterministic for a given seed) so
  // a thousand clients reconnecting to a restarted coordinator do not arrive in lockstep.
  ExponentialBackoff(absl::Duration initial, absl::Duration max, double multiplier = 2.0,
                     uint64_t seed = 1);

  // The delay to wait before the next attempt; advances the sequence.
  absl::Duration NextDelay();
  // Called after a success: the next failure starts again from `initial`.
  void Reset();
  int attempts() const { return attempts_; }

 private:
  absl::Duration initial_;
  absl::Duration max_;
  double multiplier_;
  absl::Duration current_;
  uint64_t rng_state_;
  int attempts_ = 0;
};

}  // namespace phalanx::base
