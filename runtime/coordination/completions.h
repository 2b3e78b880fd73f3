// Completions: callbacks collected while the service lock is held and run after it is released,
// so that no callback (gRPC Finish, user code) ever runs under the lock.
// Not thread-safe: one per service call, on the caller's stack.
#pragma once

#include <utility>
#include <vector>

#include "absl/functional/any_invocable.h"

namespace phalanx::coord {

class Completions {
 public:
  Completions() = default;
  Completions(const Completions&) = delete;
  Completions& operator=(const Completions&) = delete;
  // Runs anything left, so a forgotten Run() cannot drop a callback.
  ~Completions() { Run(); }

  void Add(absl::AnyInvocable<void() &&> fn) { pending_.push_back(std::move(fn)); }

  // Answers a call later: `done(value)` when Run runs, never under the caller's lock. (The
  // "fail later" / "answer later" every table of the service does.)
  template <typename Callback, typename Value>
  void Answer(Callback&& done, Value value) {
    Add([done = std::forward<Callback>(done), value = std::move(value)]() mutable {
      std::move(done)(std::move(value));
    });
  }

  // Runs the collected callbacks in the order they were added. Call without locks held.
  void Run() {
    // Callbacks may add more (a completion that triggers another); loop until empty.
    while (!pending_.empty()) {
      std::vector<absl::AnyInvocable<void() &&>> batch;
      batch.swap(pending_);
      for (auto& fn : batch) std::move(fn)();
    }
  }

 private:
  std::vector<absl::AnyInvocable<void() &&>> pending_;
};

}  // namespace phalanx::coord
