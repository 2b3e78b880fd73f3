#include "common/kube/work_queue.h"

#include <algorithm>
#include <cmath>

namespace phalanx::kube {

WorkQueue::WorkQueue(base::Clock& clock, Options options) : clock_(clock), options_(options) {}

void WorkQueue::Add(const std::string& key) {
  absl::MutexLock lock(&mu_);
  AddLocked(key);
}

void WorkQueue::AddLocked(const std::string& key) {
  if (shut_down_) return;
  if (processing_.contains(key)) {
    dirty_.insert(key);  // handed out again once the current worker is Done
    return;
  }
  if (queued_.insert(key).second) queue_.push_back(key);
}

void WorkQueue::AddAfter(const std::string& key, absl::Duration delay) {
  absl::MutexLock lock(&mu_);
  if (shut_down_) return;
  if (delay <= absl::ZeroDuration()) {
    AddLocked(key);
    return;
  }
  delayed_.emplace(clock_.Now() + delay, key);
}

void WorkQueue::AddRateLimited(const std::string& key) {
  absl::Duration delay;
  {
    absl::MutexLock lock(&mu_);
    const int failures = failures_[key]++;
    const double factor = std::ldexp(1.0, std::min(failures, 30));
    delay = std::min(options_.max_delay, options_.base_delay * factor);
  }
  AddAfter(key, delay);
}

void WorkQueue::Forget(const std::string& key) {
  absl::MutexLock lock(&mu_);
  failures_.erase(key);
}

int WorkQueue::Failures(const std::string& key) {
  absl::MutexLock lock(&mu_);
  auto it = failures_.find(key);
  return it == failures_.end() ? 0 : it->second;
}

void WorkQueue::PromoteDueLocked(absl::Time now) {
  while (!delayed_.empty() && delayed_.begin()->first <= now) {
    const std::string key = delayed_.begin()->second;
    delayed_.erase(delayed_.begin());
    AddLocked(key);
  }
}

std::optional<std::string> WorkQueue::PopLocked() {
  if (queue_.empty()) return std::nullopt;
  std::string key = std::move(queue_.front());
  queue_.pop_front();
  queued_.erase(key);
  processing_.insert(key);
  return key;
}

std::optional<std::string> WorkQueue::TryGet() {
  absl::MutexLock lock(&mu_);
  if (shut_down_) return std::nullopt;
  PromoteDueLocked(clock_.Now());
  return PopLocked();
}

std::optional<std::string> WorkQueue::Get(absl::Duration max_wait) {
  absl::MutexLock lock(&mu_);
  const absl::Time deadline = clock_.Now() + max_wait;
  while (!shut_down_) {
    const absl::Time now = clock_.Now();
    PromoteDueLocked(now);
    if (std::optional<std::string> key = PopLocked()) return key;
    if (now >= deadline) return std::nullopt;
    // Wait until something is added, the next delayed key is due, or the deadline.
    absl::Time wake = deadline;
    if (!delayed_.empty()) wake = std::min(wake, delayed_.begin()->first);
    auto ready = [this]()
                     ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return shut_down_ || !queue_.empty(); };
    clock_.AwaitWithDeadline(&mu_, absl::Condition(&ready), wake);
  }
  return std::nullopt;
}

void WorkQueue::Done(const std::string& key) {
  absl::MutexLock lock(&mu_);
  processing_.erase(key);
  if (dirty_.erase(key) > 0) AddLocked(key);
}

void WorkQueue::ShutDown() {
  absl::MutexLock lock(&mu_);
  shut_down_ = true;
}

int WorkQueue::Len() {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(queue_.size());
}

}  // namespace phalanx::kube
