#include "common/base/backoff.h"

#include <algorithm>

namespace phalanx::base {

ExponentialBackoff::ExponentialBackoff(absl::Duration initial, absl::Duration max,
                                       double multiplier, uint64_t seed)
    : initial_(initial),
      max_(std::max(max, initial)),
      multiplier_(std::max(1.0, multiplier)),
      current_(initial),
      rng_state_(seed == 0 ? 0x9E3779B97F4A7C15ull : seed) {}

absl::Duration ExponentialBackoff::NextDelay() {
  // xorshift64*: cheap, deterministic, good enough for jitter.
  rng_state_ ^= rng_state_ >> 12;
  rng_state_ ^= rng_state_ << 25;
  rng_state_ ^= rng_state_ >> 27;
  const double unit = static_cast<double>((rng_state_ * 0x2545F4914F6CDD1Dull) >> 11) /
                      static_cast<double>(1ull << 53);
  const absl::Duration delay = current_ / 2 + (current_ / 2) * unit;
  current_ = std::min(max_, current_ * multiplier_);
  ++attempts_;
  return delay;
}

void ExponentialBackoff::Reset() {
  current_ = initial_;
  attempts_ = 0;
}

}  // namespace phalanx::base
