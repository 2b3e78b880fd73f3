// UnconfirmedSets: key-value sets sent without waiting for their answers (as torch's TCPStore
// set is), tracked so that a failure is not lost: it is handed to the caller's next
// TakeFailure() or Wait(). Used by the C ABI's phalanx_kv_set_nowait. Thread-safe; the
// callbacks Track() returns hold the tracker, so they may outlive its owner.
#pragma once

#include <memory>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace phalanx::client {

class UnconfirmedSets : public std::enable_shared_from_this<UnconfirmedSets> {
 public:
  // The callback for one set's answer (call exactly once).
  absl::AnyInvocable<void(absl::Status) &&> Track() {
    {
      absl::MutexLock lock(&mu_);
      ++in_flight_;
    }
    return [self = shared_from_this()](absl::Status status) {
      absl::MutexLock lock(&self->mu_);
      --self->in_flight_;
      if (!status.ok() && self->failure_.ok()) self->failure_ = std::move(status);
    };
  }
  // The first failure since the last call (then cleared); OK if none.
  absl::Status TakeFailure() {
    absl::MutexLock lock(&mu_);
    return std::exchange(failure_, absl::OkStatus());
  }
  // Waits up to `timeout` for every set sent so far to be answered, then TakeFailure().
  // DeadlineExceeded when some is still unanswered (its answer is kept for later).
  absl::Status Wait(absl::Duration timeout) {
    absl::MutexLock lock(&mu_);
    auto answered = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return in_flight_ == 0; };
    if (!mu_.AwaitWithTimeout(absl::Condition(&answered), timeout)) {
      return absl::DeadlineExceededError(absl::StrCat(
          in_flight_, " key-value set(s) still unanswered after ", absl::FormatDuration(timeout)));
    }
    return std::exchange(failure_, absl::OkStatus());
  }

 private:
  absl::Mutex mu_;
  int64_t in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status failure_ ABSL_GUARDED_BY(mu_);
};

}  // namespace phalanx::client
