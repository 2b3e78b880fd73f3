// WireSessionStream: the client side of one task's session on the session wire
// (coordination.proto, ADR 0005): its registration and Session as a stream of this process's
// shared connection to the coordinator (WireConnection), without HTTP/2. A call is one framed
// write from the caller's own thread; its answer is read by the connection's reader thread,
// which hands it straight to the caller's callback: one thread hand-off per call on this side,
// against several through gRPC's completion queues.
//
// Deadlines: Open() is bounded by its timeout (connect, hello, answer); writes and reads as
// WireConnection's.
// Thread-safe: Send*/Cancel from any thread. Sink methods run on the connection's reader
// thread, except the OnSessionDone of Cancel(), which runs on the thread calling Cancel: that
// thread must hold no lock the sink takes. The last reference must not be dropped on the reader
// thread (the SessionChannel keeps one until WaitDone() has returned).
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "runtime/client/session_stream.h"
#include "runtime/client/wire_connection.h"
#include "runtime/proto/coordination.pb.h"

namespace phalanx::client {

class WireSessionStream final : public SessionStream, private WireConnection::Receiver {
 public:
  struct Opened {
    std::shared_ptr<WireSessionStream> stream;
    coord::v1::RegisterResponse registered;
  };

  // Presents `token` and registers `request` over this process's connection to `address`
  // (dialled if there is none; over TLS when `tls` has a CA) within `timeout`. Errors:
  // FailedPrecondition when the coordinator does not speak the wire (an older one: use gRPC);
  // Unauthenticated when TLS is on one side only or the coordinator's certificate does not
  // verify;
  // Unavailable when it cannot be reached or does not answer; otherwise the registration's own
  // error (Unauthenticated, Aborted, ...). `pause(d)` waits `d` between dials to a coordinator
  // that is not listening yet, and returns true (Open gives up) when the client is stopping.
  // With `open_at_once`, the session's `open` goes in the same write as the hello (one round
  // trip less; the server ignores it if the registration fails), and Start() sends nothing.
  static absl::StatusOr<Opened> Open(const std::string& address, const CoordinatorTls& tls,
                                     const std::string& token,
                                     const coord::v1::RegisterRequest& request,
                                     absl::Duration timeout, Sink& sink, bool open_at_once,
                                     absl::FunctionRef<bool(absl::Duration)> pause);
  ~WireSessionStream() override;

  void Start() override;
  void SendHeartbeat(int64_t sent_unix_micros) override;
  void SendCall(coord::v1::SessionCall call) override;
  void SendLeave(const std::string& reason) override;
  void Cancel() override;
  void WaitDone() override;

 private:
  WireSessionStream(std::shared_ptr<WireConnection> connection, coord::v1::TaskRef task,
                    bool open_sent, Sink& sink)
      : connection_(std::move(connection)),
        task_(std::move(task)),
        open_sent_(open_sent),
        sink_(sink) {}
  // WireConnection::Receiver (the reader thread).
  void OnFrame(coord::v1::WireServerFrame frame) override;
  void OnPeerEvents(const std::vector<coord::SessionEvent>& events) override;
  void OnConnectionEnd(const absl::Status& status) override;
  // Queued until Start(), then handed to the sink.
  void Deliver(coord::SessionEvent event);
  // The session is over (`status`): told to the sink once, if Start() handed it the stream.
  void End(absl::Status status);
  void Send(const coord::v1::SessionRequest& request);
  // Open's waits: the hello answered (or the stream over); an event (`opened`) arrived.
  bool Answered() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return registered_.has_value() || end_.has_value();
  }
  bool Delivered() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return !pending_.empty() || end_.has_value();
  }

  const std::shared_ptr<WireConnection> connection_;
  uint32_t id_ = 0;  // set by Open before any frame can arrive
  const coord::v1::TaskRef task_;
  const bool open_sent_;  // `open` went with the hello
  Sink& sink_;

  absl::Mutex mu_;
  // Until Start(), what arrives waits here (Open reads the registration from it).
  bool started_ ABSL_GUARDED_BY(mu_) = false;
  std::optional<coord::v1::RegisterResponse> registered_ ABSL_GUARDED_BY(mu_);
  std::deque<coord::SessionEvent> pending_ ABSL_GUARDED_BY(mu_);
  std::optional<absl::Status> end_ ABSL_GUARDED_BY(mu_);  // the stream's end, once known
  bool end_told_ ABSL_GUARDED_BY(mu_) = false;            // the sink has had OnSessionDone
  bool close_sent_ ABSL_GUARDED_BY(mu_) = false;
  absl::Notification done_;  // after the sink's OnSessionDone (only once started)
};

}  // namespace phalanx::client
