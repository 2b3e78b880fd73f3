#include "runtime/coordination/kv_store.h"

#include "absl/strings/str_cat.h"

namespace phalanx::coord {

absl::Status KvStore::ValidateKey(std::string_view key) {
  if (key.empty()) return absl::InvalidArgumentError("key is empty");
  if (key.size() > kMaxKeyBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("key is ", key.size(), " bytes; the limit is ", kMaxKeyBytes));
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

absl::Status KvStore::Insert(const std::string& key, std::string value, bool allow_overwrite,
                             Completions& out) {
  if (absl::Status s = ValidateKey(key); !s.ok()) return s;
  if (value.size() > kMaxValueBytes) {
    return absl::InvalidArgumentError(absl::StrCat("value for '", key, "' is ", value.size(),
                                                   " bytes; the limit is ", kMaxValueBytes));
  }
  auto it = data_.find(key);
  if (it != data_.end()) {
    if (!allow_overwrite) return absl::AlreadyExistsError(absl::StrCat("key '", key, "' exists"));
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

void KvStore::Get(const std::string& key, std::optional<TaskRef> waiter, absl::Time deadline,
                  ValueCallback done, Completions& out) {
  absl::StatusOr<std::string> result;
  if (absl::Status valid = ValidateKey(key); !valid.ok()) {
    result = valid;
  } else if (auto it = data_.find(key); it != data_.end()) {
    result = it->second;
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

std::vector<std::pair<std::string, std::string>> KvStore::GetDir(
    const std::string& directory) const {
  const std::string prefix = directory + "/";
  std::vector<std::pair<std::string, std::string>> entries;
  for (auto it = data_.lower_bound(prefix); it != data_.end() && it->first.starts_with(prefix);
       ++it) {
    entries.emplace_back(it->first, it->second);
  }
  return entries;
}

int KvStore::Delete(const std::string& key) {
  int deleted = 0;
  if (auto it = data_.find(key); it != data_.end()) {
    bytes_ -= it->first.size() + it->second.size();
    data_.erase(it);
    ++deleted;
  }
  const std::string prefix = key + "/";
  auto it = data_.lower_bound(prefix);
  while (it != data_.end() && it->first.starts_with(prefix)) {
    bytes_ -= it->first.size() + it->second.size();
    it = data_.erase(it);
    ++deleted;
  }
  return deleted;
}

void KvStore::DropTask(TaskRef gone, const absl::Status& why, Completions& out) {
  for (auto it = waiters_.begin(); it != waiters_.end();) {
    if (it->second.task.has_value() && *it->second.task == gone) {
      out.Add([done = std::move(it->second.done), why]() mutable { std::move(done)(why); });
      it = waiters_.erase(it);
    } else {
      ++it;
    }
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
    out.Add([done = std::move(waiter.done), why]() mutable { std::move(done)(why); });
  }
  waiters_.clear();
}

}  // namespace phalanx::coord
