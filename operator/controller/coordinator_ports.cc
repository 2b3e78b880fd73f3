#include "operator/controller/coordinator_ports.h"

#include <functional>

namespace phalanx::op {

void CoordinatorPortLedger::Keep(const std::string& key, int port) {
  absl::MutexLock lock(&mu_);
  handed_.try_emplace(port, key);
}

int CoordinatorPortLedger::Assign(const std::string& key, const std::string& uid,
                                  const std::set<int>& taken) {
  const int first = static_cast<int>(std::hash<std::string>{}(uid) % static_cast<size_t>(slots_));
  int chosen = base_ + first * 2;
  absl::MutexLock lock(&mu_);
  for (int i = 0; i < slots_; ++i) {
    const int port = base_ + ((first + i) % slots_) * 2;
    auto handed = handed_.find(port);
    if (!taken.contains(port) && (handed == handed_.end() || handed->second == key)) {
      chosen = port;
      break;
    }
  }
  std::erase_if(handed_, [&](const auto& entry) { return entry.second == key; });
  handed_[chosen] = key;
  return chosen;
}

void CoordinatorPortLedger::Release(const std::string& key) {
  absl::MutexLock lock(&mu_);
  std::erase_if(handed_, [&](const auto& entry) { return entry.second == key; });
}

}  // namespace phalanx::op
