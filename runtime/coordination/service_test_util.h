// Test helpers for the coordination core: a session that records its events, and slots that
// capture a callback's single result.
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "runtime/coordination/session_outbox.h"
#include "runtime/coordination/types.h"

namespace phalanx::coord::testing {

// Captures the one value a completion callback delivers.
template <typename T>
class Slot {
 public:
  auto Callback() {
    return [this](T value) { value_.emplace(std::move(value)); };
  }
  bool done() const { return value_.has_value(); }
  const T& value() const { return *value_; }

 private:
  std::optional<T> value_;
};

// A transport stand-in: drains its outbox on every notify and keeps what it saw.
class RecordingSession : public SessionOutbox::Listener {
 public:
  RecordingSession() : outbox_(std::make_shared<SessionOutbox>()) { outbox_->Attach(this); }
  ~RecordingSession() override { outbox_->Detach(); }

  std::shared_ptr<SessionOutbox> outbox() { return outbox_; }

  void OnOutboxReady() override {
    absl::MutexLock lock(&mu_);
    while (std::optional<SessionEvent> e = outbox_->Pop()) events_.push_back(std::move(*e));
    if (std::optional<absl::Status> s = outbox_->FinalStatus()) final_ = *s;
  }

  template <typename E>
  std::vector<E> EventsOf() {
    absl::MutexLock lock(&mu_);
    std::vector<E> out;
    for (const SessionEvent& e : events_) {
      if (const E* p = std::get_if<E>(&e)) out.push_back(*p);
    }
    return out;
  }
  std::optional<absl::Status> final_status() {
    absl::MutexLock lock(&mu_);
    return final_;
  }

 private:
  std::shared_ptr<SessionOutbox> outbox_;
  absl::Mutex mu_;
  std::vector<SessionEvent> events_ ABSL_GUARDED_BY(mu_);
  std::optional<absl::Status> final_ ABSL_GUARDED_BY(mu_);
};

}  // namespace phalanx::coord::testing
