// SessionStream: the client side of one task session: sends `open`, then heartbeats and calls
// on request; hands every event and the final status to its Sink. One stream per connection
// attempt; SessionChannel creates a new one after a break. Two transports: GrpcSessionStream
// (here: the Session RPC, gRPC callback API) and WireSessionStream (wire_session_stream.h).
// Thread-safe: Send*/Cancel may be called from any thread; Sink methods are called on the
// transport's threads, never under the stream's lock.
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

class SessionStream {
 public:
  class Sink {
   public:
    virtual ~Sink() = default;
    virtual void OnSessionEvent(coord::SessionEvent event) = 0;
    virtual void OnSessionDone(absl::Status status) = 0;
  };
  virtual ~SessionStream() = default;

  // Opens the session (sends `open`).
  virtual void Start() = 0;
  // Sends a heartbeat (the gRPC stream skips it while one is still waiting to be written).
  virtual void SendHeartbeat(int64_t sent_unix_micros) = 0;
  // Sends a call; its answer arrives as a CallResult event.
  virtual void SendCall(coord::v1::SessionCall call) = 0;
  // Says the task is leaving (SessionRequest.leave); the coordinator then ends the stream.
  virtual void SendLeave(const std::string& reason) = 0;
  // Ends the stream from this side; OnSessionDone follows.
  virtual void Cancel() = 0;
  // Blocks until the transport is done with this object (after OnSessionDone). Bounded: every
  // stream ends once cancelled.
  virtual void WaitDone() = 0;
};

class GrpcSessionStream final
    : public SessionStream,
      public grpc::ClientBidiReactor<coord::v1::SessionRequest, coord::v1::SessionEvent> {
 public:
  GrpcSessionStream(coord::v1::Coordination::Stub& stub, const std::string& token,
                    coord::TaskRef task, Sink& sink);

  void Start() override;
  void SendHeartbeat(int64_t sent_unix_micros) override;
  void SendCall(coord::v1::SessionCall call) override;
  void SendLeave(const std::string& reason) override;
  void Cancel() override { context_.TryCancel(); }
  void WaitDone() override { done_.WaitForNotification(); }

  void OnReadDone(bool ok) override;
  void OnWriteDone(bool ok) override;
  void OnDone(const grpc::Status& status) override;

 private:
  grpc::ClientContext context_;
  Sink& sink_;
  coord::v1::SessionEvent read_buffer_;

  absl::Mutex mu_;
  // Queues `request` behind the writes before it.
  void Send(coord::v1::SessionRequest request) ABSL_LOCKS_EXCLUDED(mu_);
  // Starts the next queued write if none is in flight.
  void PumpLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  coord::v1::SessionRequest write_buffer_ ABSL_GUARDED_BY(mu_);
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool heartbeat_queued_ ABSL_GUARDED_BY(mu_) = false;
  std::deque<coord::v1::SessionRequest> queue_ ABSL_GUARDED_BY(mu_);
  absl::Notification done_;
};

}  // namespace phalanx::client
