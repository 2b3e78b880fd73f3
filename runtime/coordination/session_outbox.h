// SessionOutbox: the ordered queue of events from the service to one task's session stream.
//
// The service appends under its own lock (Push / Close are leaf operations: they take only the
// outbox's queue mutex and call nothing). After releasing its lock the service calls Notify(),
// which tells the attached transport (a gRPC reactor, or a test) that events are ready; the
// transport drains with Pop() in order. A transport Detach()es before it is destroyed; after
// Detach returns no Notify reaches it. Shared (std::shared_ptr) between the service and the
// transport because either may outlive the other. Thread-safe.
//
// A batch of events for every session (PushShared: membership changes and error reports) is one
// queued entry holding a pointer to a batch every session shares (peer_batch.h): a mass failure
// is held in memory once. Pop() hands its events out one by one (a gRPC stream carries each);
// PopEntry() hands out the whole batch (the session wire sends it once per connection).
#pragma once

#include <deque>
#include <memory>
#include <optional>
#include <variant>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "runtime/coordination/peer_batch.h"
#include "runtime/coordination/types.h"

namespace phalanx::coord {

class SessionOutbox {
 public:
  class Listener {
   public:
    virtual ~Listener() = default;
    // Events are ready or the outbox was closed. Called without the service lock.
    virtual void OnOutboxReady() = 0;
  };

  void Attach(Listener* listener);
  // After this returns, no OnOutboxReady call is running or will start.
  void Detach();

  // Producer side (the service).
  void Push(SessionEvent event);
  // Queues every event of `batch` as one entry.
  void PushShared(std::shared_ptr<const PeerBatch> batch);
  // Ends the session once the queued events are drained; `status` is what the stream ends with.
  void Close(absl::Status status);
  void Notify();

  // Consumer side (the transport): Pop() or PopEntry(), not both.
  std::optional<SessionEvent> Pop();
  // The next entry: an event, or a whole shared batch.
  using Entry = std::variant<SessionEvent, std::shared_ptr<const PeerBatch>>;
  std::optional<Entry> PopEntry();
  // True when nothing is queued (the transport coalesces writes while more are waiting).
  bool Empty();
  // How many entries are queued (memory accounting and tests).
  size_t QueuedEntries();
  // Set once Close() was called and every event before it has been popped.
  std::optional<absl::Status> FinalStatus();

 private:
  absl::Mutex attach_mu_;  // held while calling the listener, so Detach can wait it out
  Listener* listener_ ABSL_GUARDED_BY(attach_mu_) = nullptr;

  absl::Mutex queue_mu_ ABSL_ACQUIRED_AFTER(attach_mu_);
  struct SharedBatch {
    std::shared_ptr<const PeerBatch> batch;
    size_t next = 0;  // the first event not yet popped
  };
  std::deque<std::variant<SessionEvent, SharedBatch>> queue_ ABSL_GUARDED_BY(queue_mu_);
  std::optional<absl::Status> close_status_ ABSL_GUARDED_BY(queue_mu_);
};

}  // namespace phalanx::coord
