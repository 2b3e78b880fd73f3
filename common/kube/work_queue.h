// WorkQueue: the controller work queue (controller-runtime / client-go semantics).
//   - A key is queued at most once (duplicates collapse).
//   - A key being processed is not handed out again until Done(); adds that arrive meanwhile
//     are remembered and it is queued again at Done.
//   - AddAfter(key, d) queues it once d has passed; AddRateLimited(key) uses a per-key
//     exponential backoff (base · 2^failures, capped), Forget(key) resets it.
// Time comes from the injected Clock, for the delays and for Get's wait alike: TryGet never
// blocks; Get(max_wait) waits on the clock (under FakeClock it returns a delayed key when the
// test Advance()s to it). Thread-safe.
#pragma once

#include <deque>
#include <map>
#include <optional>
#include <set>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/base/clock.h"

namespace phalanx::kube {

class WorkQueue {
 public:
  struct Options {
    absl::Duration base_delay = absl::Milliseconds(5);
    absl::Duration max_delay = absl::Seconds(300);
  };

  WorkQueue(base::Clock& clock, Options options);
  explicit WorkQueue(base::Clock& clock) : WorkQueue(clock, Options()) {}

  void Add(const std::string& key);
  void AddAfter(const std::string& key, absl::Duration delay);
  void AddRateLimited(const std::string& key);
  void Forget(const std::string& key);
  int Failures(const std::string& key);

  // The next ready key, if any (moves due delayed keys first). Marks it as processing.
  std::optional<std::string> TryGet();
  // Waits up to `max_wait` of the clock's time for a key; nullopt on timeout or after ShutDown.
  std::optional<std::string> Get(absl::Duration max_wait);
  // Ends processing of `key`; re-queues it if it was added while being processed.
  void Done(const std::string& key);

  // Wakes every Get; later Adds are ignored.
  void ShutDown();
  // Keys queued and ready (not counting delayed or processing ones): the depth metric.
  int Len();

 private:
  void AddLocked(const std::string& key) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void PromoteDueLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::optional<std::string> PopLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  base::Clock& clock_;
  const Options options_;
  absl::Mutex mu_;
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
  std::deque<std::string> queue_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<std::string> queued_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<std::string> processing_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<std::string> dirty_ ABSL_GUARDED_BY(mu_);  // added while processing
  std::multimap<absl::Time, std::string> delayed_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, int> failures_ ABSL_GUARDED_BY(mu_);
};

}  // namespace phalanx::kube
