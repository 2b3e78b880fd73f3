#include "runtime/clique/in_memory_unique_id_exchange.h"

#include "absl/strings/str_cat.h"

namespace phalanx::clique {

absl::Status InMemoryUniqueIdExchange::Publish(const std::string& key, const NcclUniqueId& id) {
  if (key.empty()) return absl::InvalidArgumentError("empty unique-id key");
  absl::MutexLock lock(&mu_);
  auto [it, inserted] = ids_.emplace(key, id);
  if (!inserted && !(it->second == id)) {
    return absl::AlreadyExistsError(absl::StrCat("another unique id is published under ", key));
  }
  return absl::OkStatus();
}

absl::StatusOr<NcclUniqueId> InMemoryUniqueIdExchange::Fetch(const std::string& key,
                                                             absl::Duration timeout) {
  if (key.empty()) return absl::InvalidArgumentError("empty unique-id key");
  absl::MutexLock lock(&mu_);
  auto published = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return ids_.contains(key); };
  if (!published() && timeout > absl::ZeroDuration()) {
    mu_.AwaitWithTimeout(absl::Condition(&published), timeout);
  }
  auto it = ids_.find(key);
  if (it == ids_.end()) {
    return timeout > absl::ZeroDuration()
               ? absl::DeadlineExceededError(absl::StrCat("no unique id under ", key, " after ",
                                                          absl::FormatDuration(timeout)))
               : absl::NotFoundError(absl::StrCat("no unique id under ", key, " yet"));
  }
  return it->second;
}

int InMemoryUniqueIdExchange::published() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(ids_.size());
}

}  // namespace phalanx::clique
