#include "runtime/coordination/kv_store.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "runtime/coordination/error_details.h"

namespace phalanx::coord {

absl::Status KvStore::ValidateLimits(const Limits& limits) {
  if (limits.max_bytes == 0 || limits.max_keys == 0 || limits.max_key_bytes == 0 ||
      limits.max_value_bytes == 0 || limits.max_dir_entries == 0 || limits.max_waiters == 0) {
    return absl::InvalidArgumentError("key-value limits must be positive");
  }
  // The server takes messages up to 4 MiB: a value (and so one directory entry) must fit one.
  constexpr size_t kMaxMessage = 3 << 20;
  const size_t entry = limits.max_value_bytes + limits.max_key_bytes;
  if (entry > kMaxMessage || limits.max_dir_bytes < entry || limits.max_dir_bytes > kMaxMessage) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--kv_dir_max_bytes (", limits.max_dir_bytes, ") must hold one entry (--kv_max_key_bytes ",
        limits.max_key_bytes, " + --kv_max_value_bytes ", limits.max_value_bytes,
        ") and stay within ", kMaxMessage, " bytes (the server takes messages up to 4 MiB)"));
  }
  return absl::OkStatus();
}

absl::Status KvStore::ValidateKey(std::string_view key) const {
  if (key.empty()) return absl::InvalidArgumentError("key is empty");
  if (key.size() > limits_.max_key_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("key is ", key.size(), " bytes; the limit is ",
                                                   limits_.max_key_bytes, " (--kv_max_key_bytes)"));
  }
  for (char c : key) {
    if (c < 0x21 || c > 0x7e) {
      return absl::InvalidArgumentError(
          "key may hold only printable ASCII characters without spaces");
    }
  }
  if (key.front() == '/' || key.back() == '/' || key.find("//") != std::string_view::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("key '", std::string(key),
                     "' has an empty path segment (leading, trailing or double '/')"));
  }
  return absl::OkStatus();
}

absl::Status KvStore::CheckRoom(const std::string& key, const std::string& value,
                                const std::string* existing) const {
  if (value.size() > limits_.max_value_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("value for '", key, "' is ", value.size(),
                                                   " bytes; the limit is ", limits_.max_value_bytes,
                                                   " (--kv_max_value_bytes)"));
  }
  if (existing == nullptr && data_.size() >= limits_.max_keys) {
    return absl::ResourceExhaustedError(absl::StrCat("key-value store is full: ", data_.size(),
                                                     " of ", limits_.max_keys,
                                                     " keys (--kv_max_keys); delete keys first"));
  }
  // Bytes after the insert: an overwrite gives back the old value's bytes.
  const size_t freed = existing == nullptr ? 0 : existing->size();
  const size_t added = (existing == nullptr ? key.size() : 0) + value.size();
  if (bytes_ - freed + added > limits_.max_bytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat("key-value store is full: ", bytes_, " of ", limits_.max_bytes,
                     " bytes (--kv_max_bytes) in use, and '", key, "' needs ", added - freed,
                     " more; delete keys first"));
  }
  return absl::OkStatus();
}

absl::Status KvStore::Insert(const std::string& key, std::string value, bool allow_overwrite,
                             Completions& out) {
  if (absl::Status s = ValidateKey(key); !s.ok()) return s;
  auto it = data_.find(key);
  if (it != data_.end() && !allow_overwrite) {
    return absl::AlreadyExistsError(absl::StrCat("key '", key, "' exists"));
  }
  if (absl::Status s = CheckRoom(key, value, it == data_.end() ? nullptr : &it->second); !s.ok()) {
    return s;
  }
  if (it != data_.end()) {
    bytes_ -= it->second.size();
    bytes_ += value.size();
    it->second = std::move(value);
  } else {
    bytes_ += key.size() + value.size();
    it = data_.emplace(key, std::move(value)).first;
  }
  auto [first, last] = waiters_.equal_range(key);
  for (auto w = first; w != last; ++w) {
    out.Add([done = std::move(w->second.done), value = it->second]() mutable {
      std::move(done)(std::move(value));
    });
  }
  waiters_.erase(first, last);
  return absl::OkStatus();
}

absl::StatusOr<int64_t> KvStore::Add(const std::string& key, int64_t delta, Completions& out) {
  if (absl::Status s = ValidateKey(key); !s.ok()) return s;
  int64_t current = 0;
  if (auto it = data_.find(key); it != data_.end() && !absl::SimpleAtoi(it->second, &current)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "key '", key, "' holds ", it->second.size(),
        " bytes that are not a decimal integer; add needs a counter (or an absent key)"));
  }
  int64_t sum = 0;
  if (__builtin_add_overflow(current, delta, &sum)) {
    return absl::OutOfRangeError(
        absl::StrCat("adding ", delta, " to '", key, "' (", current, ") overflows int64"));
  }
  if (absl::Status s = Insert(key, absl::StrCat(sum), /*allow_overwrite=*/true, out); !s.ok()) {
    return s;
  }
  return sum;
}

absl::StatusOr<CompareSetResult> KvStore::CompareAndSet(const std::string& key,
                                                        const std::optional<std::string>& expected,
                                                        std::string desired, Completions& out) {
  if (absl::Status s = ValidateKey(key); !s.ok()) return s;
  auto it = data_.find(key);
  const bool matches =
      it == data_.end() ? !expected.has_value() : expected.has_value() && *expected == it->second;
  if (!matches) {
    CompareSetResult kept;
    if (it != data_.end()) kept.value = it->second;
    return kept;
  }
  std::string stored = desired;
  if (absl::Status s = Insert(key, std::move(desired), /*allow_overwrite=*/true, out); !s.ok()) {
    return s;
  }
  return CompareSetResult{true, std::move(stored)};
}

void KvStore::Get(const std::string& key, std::optional<TaskRef> waiter, absl::Time deadline,
                  ValueCallback done, Completions& out) {
  absl::StatusOr<std::string> result;
  if (absl::Status valid = ValidateKey(key); !valid.ok()) {
    result = valid;
  } else if (auto it = data_.find(key); it != data_.end()) {
    result = it->second;
  } else if (waiters_.size() >= limits_.max_waiters) {
    result = absl::ResourceExhaustedError(absl::StrCat(
        "too many gets waiting: ", waiters_.size(), " of ", limits_.max_waiters,
        " blocked gets (--kv_max_waiters); insert the keys they wait for or let them time out"));
  } else {
    waiters_.emplace(key, Waiter{waiter, deadline, std::move(done)});
    return;
  }
  out.Add([done = std::move(done), result = std::move(result)]() mutable {
    std::move(done)(std::move(result));
  });
}

absl::StatusOr<std::string> KvStore::TryGet(const std::string& key) const {
  if (absl::Status s = ValidateKey(key); !s.ok()) return s;
  auto it = data_.find(key);
  if (it == data_.end()) return absl::NotFoundError(absl::StrCat("key '", key, "' not found"));
  return it->second;
}

absl::StatusOr<KvStore::DirPage> KvStore::GetDir(const std::string& directory,
                                                 const std::string& page_token, bool paged) const {
  if (absl::Status s = ValidateKey(directory); !s.ok()) return s;
  const std::string prefix = directory + "/";
  // The token is the last key of the previous page: stateless, so a page survives any number
  // of inserts and deletes in between (each key still comes at most once, in order).
  if (!page_token.empty() && !page_token.starts_with(prefix)) {
    return absl::InvalidArgumentError(
        absl::StrCat("page token does not belong to directory '", directory, "'"));
  }
  DirPage page;
  size_t bytes = 0;
  auto it = page_token.empty() ? data_.lower_bound(prefix) : data_.upper_bound(page_token);
  for (; it != data_.end() && it->first.starts_with(prefix); ++it) {
    const size_t size = it->first.size() + it->second.size();
    const bool full =
        page.entries.size() >= limits_.max_dir_entries || bytes + size > limits_.max_dir_bytes;
    if (full && paged && !page.entries.empty()) {
      page.next_page_token = page.entries.back().first;
      break;
    }
    if (!paged && bytes + size > limits_.max_dir_bytes) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "directory '", directory, "' holds more than ", limits_.max_dir_bytes,
          " bytes (--kv_dir_max_bytes), more than one answer may carry; page through it "
          "(a client that sets page_size)"));
    }
    bytes += size;
    page.entries.emplace_back(it->first, it->second);
  }
  return page;
}

int KvStore::Delete(const std::string& key, size_t* freed_bytes) {
  int deleted = 0;
  size_t freed = 0;
  if (auto it = data_.find(key); it != data_.end()) {
    freed += it->first.size() + it->second.size();
    data_.erase(it);
    ++deleted;
  }
  const std::string prefix = key + "/";
  auto it = data_.lower_bound(prefix);
  while (it != data_.end() && it->first.starts_with(prefix)) {
    freed += it->first.size() + it->second.size();
    it = data_.erase(it);
    ++deleted;
  }
  bytes_ -= freed;
  if (freed_bytes != nullptr) *freed_bytes += freed;
  return deleted;
}

void KvStore::DropTask(TaskRef gone, const absl::Status& why, Completions& out) {
  for (auto it = waiters_.begin(); it != waiters_.end();) {
    if (it->second.task.has_value() && *it->second.task == gone) {
      out.Answer(std::move(it->second.done), why);
      it = waiters_.erase(it);
    } else {
      ++it;
    }
  }
}

void KvStore::FailTaskWaits(const absl::Status& why, Completions& out) {
  for (auto it = waiters_.begin(); it != waiters_.end();) {
    if (!it->second.task.has_value()) {
      ++it;
      continue;
    }
    out.Add([done = std::move(it->second.done),
             status = WithContext(
                 why, absl::StrCat("get of key '", it->first, "' failed: "))]() mutable {
      std::move(done)(status);
    });
    it = waiters_.erase(it);
  }
}

void KvStore::Expire(absl::Time now, Completions& out) {
  for (auto it = waiters_.begin(); it != waiters_.end();) {
    if (it->second.deadline <= now) {
      out.Add([done = std::move(it->second.done), key = it->first]() mutable {
        std::move(done)(
            absl::DeadlineExceededError(absl::StrCat("key '", key, "' was not set in time")));
      });
      it = waiters_.erase(it);
    } else {
      ++it;
    }
  }
}

void KvStore::FailAll(const absl::Status& why, Completions& out) {
  for (auto& [key, waiter] : waiters_) {
    out.Answer(std::move(waiter.done), why);
  }
  waiters_.clear();
}

}  // namespace phalanx::coord
