// KvStore: the job's key-value store (NCCL unique ids, checkpoint steps, small metadata).
//
// Keys are 1..512 printable ASCII characters without spaces, '/'-separated into directories
// ("nccl/clique-3/id"); no empty segment, no leading or trailing '/'. Values are bytes, at most
// kMaxValueBytes. A blocking Get waits until the key is inserted or its deadline passes.
//
// Not thread-safe: CoordinationService calls it with its lock held; callbacks are collected into
// `Completions` and run after the lock is released.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "runtime/coordination/completions.h"
#include "runtime/coordination/types.h"

namespace phalanx::coord {

class KvStore {
 public:
  static constexpr size_t kMaxKeyBytes = 512;
  static constexpr size_t kMaxValueBytes = 1 << 20;

  // InvalidArgument naming the problem, or OK.
  static absl::Status ValidateKey(std::string_view key);

  // AlreadyExists when the key exists and !allow_overwrite; InvalidArgument for a bad key or an
  // oversized value. Wakes blocked getters of the key.
  absl::Status Insert(const std::string& key, std::string value, bool allow_overwrite,
                      Completions& out);
  // Answers at once when the key exists; otherwise waits. `waiter` (if set) is the task whose
  // death aborts the wait. Fails InvalidArgument (bad key) or DeadlineExceeded.
  void Get(const std::string& key, std::optional<TaskRef> waiter, absl::Time deadline,
           ValueCallback done, Completions& out);
  // NotFound when absent.
  absl::StatusOr<std::string> TryGet(const std::string& key) const;
  // Every entry strictly under `directory` ("a/b" → "a/b/x", "a/b/c/y"), in key order.
  std::vector<std::pair<std::string, std::string>> GetDir(const std::string& directory) const;
  // Deletes `key` and everything under it as a directory; returns how many entries went.
  int Delete(const std::string& key);

  void DropTask(TaskRef gone, const absl::Status& why, Completions& out);
  void Expire(absl::Time now, Completions& out);
  void FailAll(const absl::Status& why, Completions& out);

  size_t entries() const { return data_.size(); }
  size_t bytes() const { return bytes_; }

 private:
  struct Waiter {
    std::optional<TaskRef> task;
    absl::Time deadline;
    ValueCallback done;
  };

  std::map<std::string, std::string> data_;
  size_t bytes_ = 0;
  std::multimap<std::string, Waiter> waiters_;
};

}  // namespace phalanx::coord
