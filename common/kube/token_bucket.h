// TokenBucket: the client-side QPS/burst limit on Kubernetes API calls (like client-go's
// flowcontrol). Reserve() takes a token and says how long the caller must wait before using
// it, so no request is refused, only spaced out. Pure logic on the time it is given;
// not thread-safe (the REST client guards it with its own lock).
#pragma once

#include "absl/time/time.h"

namespace phalanx::kube {

class TokenBucket {
 public:
  // `qps` tokens per second, at most `burst` saved up. qps <= 0 means unlimited.
  TokenBucket(double qps, int burst, absl::Time now);

  // Takes one token; returns how long to wait before the request may go (zero if at once).
  absl::Duration Reserve(absl::Time now);

 private:
  double qps_;
  double burst_;
  double tokens_;  // may go negative: reservations made ahead of time
  absl::Time last_;
};

}  // namespace phalanx::kube
