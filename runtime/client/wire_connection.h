// WireConnection: this process's session-wire connection to one coordinator (ADR 0005,
// wire_format.h). Every task session of the process that goes to the same address rides it as
// a stream (WireSessionStream), as gRPC shares one HTTP/2 connection between the channels of a
// process: a task-host or test process with many tasks dials once, starts one reader thread,
// and the coordinator's fan-out (a barrier's release) reaches all of its tasks in one write.
//
// The connection's end is every stream's end; a process that dies closes it, which is the crash
// signal for each of its tasks. One stream's end (a task closing, a refusal) is its own.
//
// Frames are written by the calling thread; when several threads write at once, one of them
// writes everything queued meanwhile in one send (the others return at once), so a burst of
// calls costs few system calls. One reader thread per connection reads and hands each frame to
// its stream's Receiver.
// Deadlines: dialling is bounded by the caller's; a write waits at most kSendTimeout for room
// in the socket before the connection is broken; reads wait without one, because each
// session's heartbeat check (SessionChannel) cancels a silent stream.
// Thread-safe. Receiver methods run on the reader thread, never under a lock of this object;
// Detach waits for a call in progress to its receiver, so it must not be called from one. The
// reader thread is the whole process's: what runs on it (the callbacks of asynchronous calls)
// must be short and must not wait for another coordination call, whose answer it would read.
#pragma once

#include <sys/types.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "runtime/client/coordinator_credentials.h"
#include "runtime/coordination/coalescing_writer.h"
#include "runtime/coordination/tls_session.h"
#include "runtime/coordination/types.h"
#include "runtime/coordination/wire_format.h"
#include "runtime/proto/coordination.pb.h"

namespace phalanx::client {

class WireConnection {
 public:
  class Receiver {
   public:
    virtual ~Receiver() = default;
    // A frame for this stream. After an `end` frame nothing more comes.
    virtual void OnFrame(coord::v1::WireServerFrame frame) = 0;
    // The stream's next events: a peer batch (membership changes, error reports) the
    // connection received once for all of its streams (WirePeerBatch).
    virtual void OnPeerEvents(const std::vector<coord::SessionEvent>& events) = 0;
    // The connection ended (`status` says why); nothing more comes.
    virtual void OnConnectionEnd(const absl::Status& status) = 0;
  };

  static constexpr absl::Duration kSendTimeout = absl::Seconds(10);
  // Largest frame accepted from the coordinator (a key-value answer holds at most 1 MiB).
  static constexpr size_t kMaxFrameBytes = 16 << 20;

  // This process's live connection to `address` (host:port), dialled now if there is none;
  // over TLS when `tls` has a CA (the handshake is part of the dial, within `deadline`).
  // Like gRPC's wait-for-ready, a coordinator that is not listening yet (restarting, or its pod
  // still starting) is dialled again every 25 ms until `deadline`; `pause(d)` waits between
  // dials and returns true (give up: Cancelled) when the caller is stopping. Errors:
  // Unavailable (cannot connect by the deadline), InvalidArgument (not host:port, or a CA that
  // does not parse), Unauthenticated (the TLS handshake failed, or the coordinator has no TLS).
  static absl::StatusOr<std::shared_ptr<WireConnection>> ForAddress(
      const std::string& address, const CoordinatorTls& tls, absl::Time deadline,
      absl::FunctionRef<bool(absl::Duration)> pause);
  ~WireConnection();
  WireConnection(const WireConnection&) = delete;
  WireConnection& operator=(const WireConnection&) = delete;

  const std::string& address() const { return address_; }
  // When the reader last received bytes (the infinite past before any).
  absl::Time last_read() const { return absl::FromUnixMicros(last_read_micros_.load()); }

  // A new stream whose frames go to `receiver`; its id. `first_frames(id)` makes the stream's
  // first frames (its hello), which are written before any later stream's: the coordinator
  // takes stream ids in increasing order. On a connection that has ended, `receiver` is told so
  // before this returns.
  uint32_t Attach(Receiver& receiver, absl::FunctionRef<std::string(uint32_t)> first_frames);
  // No call reaches the stream's receiver after this returns. Idempotent.
  void Detach(uint32_t stream);
  // Writes whole frames (see the header comment). A failure breaks the connection.
  void Send(std::string bytes);
  // Ends the connection and with it every stream on it (told `why`). Idempotent.
  void Break(const absl::Status& why);
  // The stream's session is open (it counts for BreakUnlessInUse).
  void MarkInUse(uint32_t stream);
  // Breaks the connection unless another stream's session is open on it: a silent connection
  // is only given up where that ends no other task's session (their heartbeat checks judge, and
  // streams that are only registering again do not hold it).
  void BreakUnlessInUse(uint32_t stream, const absl::Status& why);

 private:
  enum class State { kDialling, kOpen, kEnded };
  struct Entry {
    Receiver* receiver;
    int delivering = 0;   // receiver calls in progress
    bool in_use = false;  // its session is open
  };

  WireConnection(std::string address, CoordinatorTls tls)
      : address_(std::move(address)), tls_config_(std::move(tls)) {}
  // Waits until the dialler is done (or the deadline); the connection's status then.
  absl::Status AwaitDialled(absl::Time deadline, absl::FunctionRef<bool(absl::Duration)> pause);
  void Dial(absl::Time deadline, absl::FunctionRef<bool(absl::Duration)> pause);
  // Asks for TLS on the dialled `fd` and runs the handshake (blocking, until `deadline`).
  absl::Status StartTls(int fd, absl::Time deadline);
  // `bytes` as they go on the socket: encrypted with TLS.
  std::string Seal(std::string bytes);
  // Writes what is queued unless another thread is already doing so.
  void Flush() ABSL_UNLOCK_FUNCTION(write_mu_);
  void ReadLoop();
  absl::Status ReadUntilEnd();
  // Hands `frame` to its stream's receiver (`deliver`), if the stream is still attached.
  void Route(uint32_t stream, bool last, absl::FunctionRef<void(Receiver&)> deliver);
  // Handles a frame of the connection stream (a peer batch's definition).
  absl::Status OnConnectionFrame(const coord::v1::WireServerFrame& frame);
  // The stream's events are those of peer batch `id`.
  absl::Status RoutePeerBatch(uint32_t stream, uint64_t id);
  void EndAll(const absl::Status& status);

  const std::string address_;
  const CoordinatorTls tls_config_;
  const pid_t pid_ = getpid();  // the process that made it
  std::atomic<int64_t> last_read_micros_{std::numeric_limits<int64_t>::min()};
  int fd_ = -1;  // set once when the dial succeeds (under mu_), constant after
  std::thread reader_;
  // With TLS, set by the dial before the reader starts; its calls are serialised by tls_mu_
  // (the reader decrypts while one writer at a time encrypts).
  std::unique_ptr<coord::TlsSession> tls_;
  absl::Mutex tls_mu_;
  // Plaintext that arrived with the end of the TLS handshake: the reader's first bytes.
  std::string handshake_leftover_;
  // The peer batches defined on the connection (reader thread only).
  coord::PeerBatchWindow<std::shared_ptr<const std::vector<coord::SessionEvent>>> peer_batches_;

  absl::Mutex mu_;
  State state_ ABSL_GUARDED_BY(mu_) = State::kDialling;
  std::optional<absl::Status> ended_ ABSL_GUARDED_BY(mu_);  // why it ended (or is ending)
  uint32_t last_stream_ ABSL_GUARDED_BY(mu_) = 0;
  absl::flat_hash_map<uint32_t, Entry> streams_ ABSL_GUARDED_BY(mu_);

  absl::Mutex write_mu_ ABSL_ACQUIRED_AFTER(mu_);
  // Corked while the reader hands out a batch of frames: writes queue, and the reader sends them.
  coord::CoalescingWriter writer_ ABSL_GUARDED_BY(write_mu_);
};

}  // namespace phalanx::client
