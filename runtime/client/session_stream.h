// SessionStream: the client side of one Session stream (gRPC callback API). Sends `open`, then
// heartbeats on request; hands every event and the final status to its Sink. One stream per
// connection attempt; GrpcCoordinationClient creates a new one after a break.
// Thread-safe: SendHeartbeat/Cancel may be called from any thread; Sink methods are called on
// gRPC threads, never under this object's lock.
#pragma once

#include <grpcpp/grpcpp.h>

#include <deque>
#include <memory>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "runtime/coordination/types.h"
#include "runtime/proto/coordination.grpc.pb.h"

namespace phalanx::client {

class SessionStream final
    : public grpc::ClientBidiReactor<coord::v1::SessionRequest, coord::v1::SessionEvent> {
 public:
  class Sink {
   public:
    virtual ~Sink() = default;
    virtual void OnSessionEvent(coord::SessionEvent event) = 0;
    virtual void OnSessionDone(absl::Status status) = 0;
  };

  SessionStream(coord::v1::Coordination::Stub& stub, const std::string& token, coord::TaskRef task,
                Sink& sink);

  // Starts the call with the `open` message.
  void Start();
  // Queues a heartbeat unless one is already waiting to be written.
  void SendHeartbeat(int64_t sent_unix_micros);
  // Queues a call; its answer arrives as a CallResult event.
  void SendCall(coord::v1::SessionCall call);
  // Ends the stream from this side; OnSessionDone follows.
  void Cancel() { context_.TryCancel(); }
  // Blocks until gRPC is done with this object (after OnSessionDone). Bounded: every stream
  // ends once cancelled.
  void WaitDone() { done_.WaitForNotification(); }

  void OnReadDone(bool ok) override;
  void OnWriteDone(bool ok) override;
  void OnDone(const grpc::Status& status) override;

 private:
  grpc::ClientContext context_;
  Sink& sink_;
  coord::v1::SessionEvent read_buffer_;

  absl::Mutex mu_;
  // Starts the next queued write if none is in flight.
  void PumpLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  coord::v1::SessionRequest write_buffer_ ABSL_GUARDED_BY(mu_);
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool heartbeat_queued_ ABSL_GUARDED_BY(mu_) = false;
  std::deque<coord::v1::SessionRequest> queue_ ABSL_GUARDED_BY(mu_);
  absl::Notification done_;
};

}  // namespace phalanx::client
