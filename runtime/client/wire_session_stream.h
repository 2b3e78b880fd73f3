// WireSessionStream: the client side of the session wire (coordination.proto, ADR 0005): the
// task's registration and Session over one plain TCP connection to the coordinator's port,
// without HTTP/2. A call is one framed write from the caller's own thread; its answer is read
// by the stream's reader thread, which hands it straight to the caller's callback. That is one
// thread hand-off per call on this side, against several through gRPC's completion queues.
//
// Deadlines: Open() is bounded by its timeout (connect, hello, answer); a write waits at most
// kSendTimeout for room in the socket before the stream is broken; reads wait without one,
// because the session's own heartbeat check (SessionChannel) cancels a silent stream.
// Thread-safe: Send*/Cancel from any thread; Sink methods on the reader thread, never under
// this object's lock. The last reference must not be dropped on the reader thread (the
// SessionChannel keeps one until WaitDone() has returned).
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "runtime/client/session_stream.h"
#include "runtime/proto/coordination.pb.h"

namespace phalanx::client {

class WireSessionStream final : public SessionStream {
 public:
  struct Opened {
    std::shared_ptr<WireSessionStream> stream;
    coord::v1::RegisterResponse registered;
  };
  static constexpr absl::Duration kSendTimeout = absl::Seconds(10);
  // Largest frame accepted from the coordinator (a key-value answer holds at most 1 MiB).
  static constexpr size_t kMaxFrameBytes = 16 << 20;

  // Connects to `address` (host:port), presents `token` and registers `request` within
  // `timeout`. Errors: FailedPrecondition when the coordinator does not speak the wire (an
  // older one, or one serving TLS: use gRPC); Unavailable when it cannot be reached or closes
  // the connection; otherwise the registration's own error (Unauthenticated, Aborted, ...).
  // `pause(d)` waits `d` between dials to a coordinator that is not listening yet, and returns
  // true (Open gives up) when the client is stopping. With `open_at_once`, the session's `open`
  // goes in the same write as the hello (one round trip less; the server ignores it if the
  // registration fails), and Start() sends nothing.
  static absl::StatusOr<Opened> Open(const std::string& address, const std::string& token,
                                     const coord::v1::RegisterRequest& request,
                                     absl::Duration timeout, Sink& sink, bool open_at_once,
                                     absl::FunctionRef<bool(absl::Duration)> pause);
  ~WireSessionStream() override;

  void Start() override;
  void SendHeartbeat(int64_t sent_unix_micros) override;
  void SendCall(coord::v1::SessionCall call) override;
  void Cancel() override;
  void WaitDone() override { done_.WaitForNotification(); }

 private:
  WireSessionStream(int fd, coord::v1::TaskRef task, bool open_sent, std::string unread, Sink& sink)
      : fd_(fd),
        task_(std::move(task)),
        open_sent_(open_sent),
        unread_(std::move(unread)),
        sink_(sink) {}
  // Writes one framed message; a failure breaks the stream (the reader reports it).
  void Send(const coord::v1::SessionRequest& request);
  void ReadLoop();
  absl::Status ReadUntilEnd();

  const int fd_;
  const coord::v1::TaskRef task_;
  const bool open_sent_;  // `open` went with the hello
  std::string unread_;    // bytes read with the answer to the hello (reader thread after Start)
  Sink& sink_;
  std::atomic<bool> cancelled_{false};
  absl::Mutex write_mu_;  // one frame at a time on the socket
  std::thread reader_;
  absl::Notification done_;
};

}  // namespace phalanx::client
