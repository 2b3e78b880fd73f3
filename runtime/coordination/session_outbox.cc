#include "runtime/coordination/session_outbox.h"

namespace phalanx::coord {

void SessionOutbox::Attach(Listener* listener) {
  absl::MutexLock lock(&attach_mu_);
  listener_ = listener;
}

void SessionOutbox::Detach() {
  absl::MutexLock lock(&attach_mu_);
  listener_ = nullptr;
}

void SessionOutbox::Push(SessionEvent event) {
  absl::MutexLock lock(&queue_mu_);
  if (close_status_.has_value()) return;  // nothing follows the end of a session
  queue_.push_back(std::move(event));
}

void SessionOutbox::PushShared(std::shared_ptr<const PeerBatch> batch) {
  if (batch == nullptr || batch->events.empty()) return;
  absl::MutexLock lock(&queue_mu_);
  if (close_status_.has_value()) return;
  queue_.push_back(SharedBatch{std::move(batch), 0});
}

void SessionOutbox::Close(absl::Status status) {
  absl::MutexLock lock(&queue_mu_);
  if (!close_status_.has_value()) close_status_ = std::move(status);
}

void SessionOutbox::Notify() {
  // The listener only starts a write (it never calls back into the service), so holding
  // attach_mu_ here is what makes Detach() a reliable barrier against use-after-free.
  absl::MutexLock lock(&attach_mu_);
  if (listener_ != nullptr) listener_->OnOutboxReady();
}

std::optional<SessionEvent> SessionOutbox::Pop() {
  absl::MutexLock lock(&queue_mu_);
  if (queue_.empty()) return std::nullopt;
  if (auto* shared = std::get_if<SharedBatch>(&queue_.front())) {
    SessionEvent event = shared->batch->events[shared->next++];
    if (shared->next == shared->batch->events.size()) queue_.pop_front();
    return event;
  }
  SessionEvent event = std::move(std::get<SessionEvent>(queue_.front()));
  queue_.pop_front();
  return event;
}

std::optional<SessionOutbox::Entry> SessionOutbox::PopEntry() {
  absl::MutexLock lock(&queue_mu_);
  if (queue_.empty()) return std::nullopt;
  Entry entry;
  if (auto* shared = std::get_if<SharedBatch>(&queue_.front())) {
    entry = std::move(shared->batch);
  } else {
    entry = std::move(std::get<SessionEvent>(queue_.front()));
  }
  queue_.pop_front();
  return entry;
}

bool SessionOutbox::Empty() {
  absl::MutexLock lock(&queue_mu_);
  return queue_.empty();
}

size_t SessionOutbox::QueuedEntries() {
  absl::MutexLock lock(&queue_mu_);
  return queue_.size();
}

std::optional<absl::Status> SessionOutbox::FinalStatus() {
  absl::MutexLock lock(&queue_mu_);
  if (!queue_.empty()) return std::nullopt;
  return close_status_;
}

}  // namespace phalanx::coord
