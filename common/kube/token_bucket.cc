#include "common/kube/token_bucket.h"

#include <algorithm>

namespace phalanx::kube {

TokenBucket::TokenBucket(double qps, int burst, absl::Time now)
    : qps_(qps), burst_(std::max(1, burst)), tokens_(burst_), last_(now) {}

absl::Duration TokenBucket::Reserve(absl::Time now) {
  if (qps_ <= 0) return absl::ZeroDuration();
  if (now > last_) {
    tokens_ = std::min(burst_, tokens_ + absl::ToDoubleSeconds(now - last_) * qps_);
    last_ = now;
  }
  tokens_ -= 1;
  if (tokens_ >= 0) return absl::ZeroDuration();
  return absl::Seconds(-tokens_ / qps_);
}

}  // namespace phalanx::kube
