// KvStore: the job's key-value store (NCCL unique ids, checkpoint steps, small metadata).
//
// Keys are 1..limits.max_key_bytes printable ASCII characters without spaces, '/'-separated
// into directories ("nccl/clique-3/id"); no empty segment, no leading or trailing '/'. Values are
// bytes, at most limits.max_value_bytes. A blocking Get waits until the key is inserted or its
// deadline passes, or a task of the job fails while it waits (FailTaskWaits: any peer may be the
// one that would have set the key, and its failure sends the job to recovery anyway).
//
// Memory is bounded per job (any token holder can write): at most `max_keys` entries and
// `max_bytes` of keys plus values, counted exactly (a delete or a smaller overwrite gives the
// bytes back). A directory answer is a page of at most `max_dir_entries` entries and
// `max_dir_bytes` bytes (always at least one entry), resumed from a page token.
//
// Not thread-safe: CoordinationService calls it with its lock held; callbacks are collected into
// `Completions` and run after the lock is released.
#pragma once

#include <cstdint>
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
  // Each limit names the coordinator flag that sets it, so an error can say what to change.
  struct Limits {
    size_t max_bytes = 64 << 20;       // --kv_max_bytes: keys + values of the whole job
    size_t max_keys = 100'000;         // --kv_max_keys
    size_t max_key_bytes = 512;        // --kv_max_key_bytes
    size_t max_value_bytes = 1 << 20;  // --kv_max_value_bytes
    size_t max_dir_entries = 1000;     // --kv_dir_max_entries: entries in one directory page
    size_t max_dir_bytes = 2 << 20;    // --kv_dir_max_bytes: keys + values in one answer
    size_t max_waiters = 32'768;       // --kv_max_waiters: blocked gets waiting at once
  };

  // One page of a directory. `next_page_token` is empty on the last page.
  struct DirPage {
    std::vector<std::pair<std::string, std::string>> entries;
    std::string next_page_token;
  };

  KvStore() = default;
  explicit KvStore(Limits limits) : limits_(limits) {}

  // InvalidArgument when a limit is zero, or one key and value could not fit one answer.
  static absl::Status ValidateLimits(const Limits& limits);

  // InvalidArgument naming the problem, or OK.
  absl::Status ValidateKey(std::string_view key) const;

  // AlreadyExists when the key exists and !allow_overwrite; InvalidArgument for a bad key or an
  // oversized value; ResourceExhausted ("key-value store is full: ...", naming the quota, its
  // use and its flag) when the entry would pass max_keys or max_bytes. Wakes blocked getters.
  absl::Status Insert(const std::string& key, std::string value, bool allow_overwrite,
                      Completions& out);
  // Atomic read-modify-writes for counters and elections (torch.distributed's Store add and
  // compare_set sit on them). Both store through Insert (its limits; blocked gets wake).
  //
  // Add: the value under `key` is a decimal int64 (what torch's TCPStore keeps, so a plain get
  // reads "3"); absent counts as 0. Stores and returns value + delta. FailedPrecondition when
  // the value is not a decimal integer, OutOfRange when the sum overflows.
  absl::StatusOr<int64_t> Add(const std::string& key, int64_t delta, Completions& out);
  // Stores `desired` when the value under `key` is `expected` (nullopt: when the key is absent);
  // says whether it did and what is stored afterwards either way.
  absl::StatusOr<CompareSetResult> CompareAndSet(const std::string& key,
                                                 const std::optional<std::string>& expected,
                                                 std::string desired, Completions& out);
  // Answers at once when the key exists; otherwise waits. `waiter` (if set) is the task whose
  // death aborts the wait. Fails InvalidArgument (bad key), DeadlineExceeded, or
  // ResourceExhausted when max_waiters gets are waiting already.
  void Get(const std::string& key, std::optional<TaskRef> waiter, absl::Time deadline,
           ValueCallback done, Completions& out);
  // NotFound when absent.
  absl::StatusOr<std::string> TryGet(const std::string& key) const;
  // Entries strictly under `directory` ("a/b" → "a/b/x", "a/b/c/y"), in key order, starting
  // after `page_token` (empty: from the start). With `paged` false (a caller that cannot page)
  // the whole directory comes back, or ResourceExhausted when it exceeds max_dir_bytes.
  // InvalidArgument for a bad directory or a token from another directory.
  absl::StatusOr<DirPage> GetDir(const std::string& directory, const std::string& page_token,
                                 bool paged) const;
  // Deletes `key` and everything under it as a directory; returns how many entries went and
  // adds the bytes they held to `*freed_bytes` when set.
  int Delete(const std::string& key, size_t* freed_bytes = nullptr);

  void DropTask(TaskRef gone, const absl::Status& why, Completions& out);
  // A task of the job failed: every get a task waits in fails with `why`, prefixed with its key.
  // Gets of callers that are not tasks (tools, the operator) keep waiting.
  void FailTaskWaits(const absl::Status& why, Completions& out);
  void Expire(absl::Time now, Completions& out);
  void FailAll(const absl::Status& why, Completions& out);

  size_t entries() const { return data_.size(); }
  size_t bytes() const { return bytes_; }
  const Limits& limits() const { return limits_; }

 private:
  struct Waiter {
    std::optional<TaskRef> task;
    absl::Time deadline;
    ValueCallback done;
  };

  // InvalidArgument (value cap) or ResourceExhausted (quota) for storing `value` under `key`,
  // which holds `existing` (nullptr: a new key).
  absl::Status CheckRoom(const std::string& key, const std::string& value,
                         const std::string* existing) const;

  const Limits limits_{};
  std::map<std::string, std::string> data_;
  size_t bytes_ = 0;
  std::multimap<std::string, Waiter> waiters_;
};

}  // namespace phalanx::coord
